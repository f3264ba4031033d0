import pytest

# The shipped contract's asserts get pytest's readable failure messages.
pytest.register_assert_rewrite("stores.testing.journal_contract")
