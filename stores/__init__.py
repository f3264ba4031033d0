"""Storage backends: object stores for the log, and snapshot-mode state stores."""
