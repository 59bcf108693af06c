#!/usr/bin/env python3
"""Checks a Prometheus text exposition (sel_store_metrics) with Debian's
python3-prometheus-client parser, plus the rules that parser lets pass:
every family once, with # HELP and # TYPE before its samples, and each
family's samples together (never interleaved with another family's).

    tests/metrics_check.py FILE [REQUIRED_FAMILY...]

Exits 0 when the text is valid, 1 naming what is wrong, 77 (skip) when
the prometheus_client module is missing."""
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("metrics_check: python3-prometheus-client is not installed", file=sys.stderr)
    sys.exit(77)


def family_of(sample_name, families):
    for suffix in ("_bucket", "_sum", "_count", "_total", "_created", "_info"):
        if sample_name.endswith(suffix) and sample_name[: -len(suffix)] in families:
            return sample_name[: -len(suffix)]
    return sample_name


def main():
    text = open(sys.argv[1], encoding="utf-8").read()
    errors = []
    # the line-level rules
    helped, typed, closed, current = set(), {}, set(), None
    for number, line in enumerate(text.splitlines(), 1):
        if not line:
            errors.append(f"line {number}: empty line")
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            name = line.split()[2]
            seen = helped if line.startswith("# HELP ") else typed
            if name in seen:
                errors.append(f"line {number}: a second {line[:6]} for {name}")
            if line.startswith("# HELP "):
                helped.add(name)
            else:
                typed[name] = line.split()[3]
                if name not in helped:
                    errors.append(f"line {number}: {name} has no # HELP before its # TYPE")
            if current and current != name:
                closed.add(current)
            current = name
            continue
        name = line.split("{")[0].split(" ")[0]
        fam = family_of(name, typed)
        if fam not in typed:
            errors.append(f"line {number}: sample {name} before its family's # TYPE")
        elif fam in closed or fam != current:
            errors.append(f"line {number}: {fam} interleaved with {current}")
    # the parser's view
    try:
        names = [f.name for f in text_string_to_metric_families(text)]
    except Exception as e:  # the parser raises ValueError and others
        errors.append(f"the parser refused the text: {e}")
        names = []
    for name in set(names):
        if names.count(name) > 1:
            errors.append(f"family {name} appears {names.count(name)} times")
    for required in sys.argv[2:]:
        if required not in names and required not in typed:
            errors.append(f"no family {required}")
    for e in errors:
        print("metrics_check:", e, file=sys.stderr)
    if not errors:
        print(f"metrics_check: {len(names)} families, valid")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
