import pytest

# Rewrite the shared suite's asserts so that a failing store gets readable messages.
pytest.register_assert_rewrite("stores.testing.state_contract")
