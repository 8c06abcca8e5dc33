"""Helpers the tests share that are more than one function: the tiny-model zoo."""
