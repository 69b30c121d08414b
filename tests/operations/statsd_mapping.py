"""
Apply ``monitoring/statsd-mappings.yml`` to StatsD lines the way the Prometheus statsd_exporter does.

A stand-in, used because the exporter cannot be installed here (Debian 12 does not package it, and
neither PyPI nor the other reachable registries ship its binary). It implements only what the
mapping file uses, as the exporter documents it: InfluxDB-style tags (``name,k=v,...:1|c``) become
labels; ``glob`` matches (the default ``match_type``) where ``*`` stands for one dot-free part of
the name and ``$n`` in a label value for the part the n-th ``*`` matched; the first matching mapping
wins; ``action: drop`` drops the line; counters add up. An unmapped line is left out (the real
exporter would expose it under its escaped name; nothing in this repository reads those).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml


def _glob_regex(pattern: str) -> re.Pattern[str]:
    return re.compile("^" + r"\.".join("([^.]+)" if p == "*" else re.escape(p) for p in pattern.split(".")) + "$")


class Mapper:
    """The mappings of one statsd_exporter mapping file."""

    def __init__(self, path: Path) -> None:
        self.mappings: list[dict[str, Any]] = yaml.safe_load(path.read_text())["mappings"]
        for mapping in self.mappings:
            if mapping.get("match_type", "glob") != "glob":
                raise ValueError(f"only glob mappings are understood here: {mapping}")
            mapping["_regex"] = _glob_regex(mapping["match"])

    def map_line(self, line: str) -> tuple[str, dict[str, str], float] | None:
        """``(metric, labels, value)`` of one counter line, or ``None`` if dropped, unmapped or not a counter."""
        head, _, rest = line.partition(":")
        value, _, kind = rest.partition("|")
        if not kind.startswith("c"):
            return None
        name, *tags = head.split(",")
        labels = dict(tag.split("=", 1) for tag in tags)
        for mapping in self.mappings:
            found = mapping["_regex"].match(name)
            if not found:
                continue
            if mapping.get("action") == "drop":
                return None
            parts = found.groups()
            for key, template in (mapping.get("labels") or {}).items():
                labels[key] = re.sub(r"\$(\d+)", lambda m, parts=parts: parts[int(m.group(1)) - 1], template)
            return mapping["name"], labels, float(value)
        return None

    def exposition(self, lines: list[str], *, zero: bool = False) -> str:
        """The Prometheus text exposition of the counters ``lines`` add up to (all at 0 with ``zero``)."""
        totals: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(lambda: defaultdict(float))
        helps = {m["name"]: m.get("help", m["name"]) for m in self.mappings}
        for line in lines:
            mapped = self.map_line(line)
            if mapped:
                metric, labels, value = mapped
                totals[metric][tuple(sorted(labels.items()))] += 0 if zero else value
        out = []
        for metric in sorted(totals):
            out += [f"# HELP {metric} {helps[metric]}", f"# TYPE {metric} counter"]
            for labels, value in sorted(totals[metric].items()):
                body = ",".join(f'{k}="{v}"' for k, v in labels)
                out.append(f"{metric}{{{body}}} {value:g}")
        return "\n".join(out) + "\n"
