"""``conf_vars``: as upstream's ``tests_common.test_utils.config.conf_vars``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def conf_vars(overrides: dict[tuple[str, str], str | None]) -> Iterator[None]:
    """
    Override Airflow configuration options for the duration of the block.

    A value of ``None`` removes the option. Environment variables that would shadow an overridden
    option are removed while the block runs, as upstream does.
    """
    from airflow import settings
    from airflow.configuration import conf

    original: dict[tuple[str, str], str | None] = {}
    original_env: dict[str, str] = {}
    for (section, key), value in overrides.items():
        env = conf._env_var_name(section, key)
        if env in os.environ:
            original_env[env] = os.environ.pop(env)
        original[(section, key)] = conf.get(section, key) if conf.has_option(section, key) else None
        if value is not None:
            if not conf.has_section(section):
                conf.add_section(section)
            conf.set(section, key, value)
        elif conf.has_section(section) and conf.has_option(section, key):
            conf.remove_option(section, key)
    settings.configure_vars()
    try:
        yield
    finally:
        for (section, key), value in original.items():
            if value is not None:
                if not conf.has_section(section):
                    conf.add_section(section)
                conf.set(section, key, value)
            elif conf.has_section(section) and conf.has_option(section, key):
                conf.remove_option(section, key)
        os.environ.update(original_env)
        settings.configure_vars()
