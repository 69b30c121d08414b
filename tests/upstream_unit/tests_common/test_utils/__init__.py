"""Helpers mirroring upstream's ``tests_common.test_utils`` (subset)."""
