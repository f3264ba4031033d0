"""agent-journal: an event-sourced journal engine for AI-agent state."""
