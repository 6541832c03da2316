#!/usr/bin/env python3
"""Ranges and defaults said once: bulkhead.ini(5), the reference, against
rules.ini.example, the annotated example, and both against the parser.

For every number key (".BI key N") with an entry in bulkhead.ini(5):
  - the widest "A to B" range and the "default X" its entry states are the
    ones the example's comment on that key states, where it states one;
  - the range is the parser's: `build/bulkhead check` takes B and refuses
    B + 1 as out of range (keys whose check needs other keys get them;
    the fleet's are left to its own tests, since check then asks Redis).

One line per disagreement, naming the key and both sides; exit 1 if any.

    scripts/check-key-facts.py [PAGE [EXAMPLE]]
"""
import os
import re
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANGE = re.compile(r"(\d[\d,]*) to (\d[\d,]*)")
DEFAULT = re.compile(r"\bdefault:? (\d+)\b", re.IGNORECASE)
# What a key needs beside it for check to judge its own value alone.
CONTEXT = {
    "breaker_open_ms": "breaker_failures = 1\nbreaker_open_max_ms = 86400000",
    "breaker_open_max_ms": "breaker_failures = 1\nbreaker_open_ms = 1",
    "min_limit": "adaptive = aimd\nmax_limit = 32767",
    "max_limit": "adaptive = aimd",
    "adaptive_latency_ms": "adaptive = aimd",
}


def plain(text):
    """A man page's source as words: font escapes and requests gone."""
    text = re.sub(r"\\f[BIRP]|\\-|\\\(..", lambda m: "-" if m.group() == "\\-" else "", text)
    lines = []
    for line in text.splitlines():
        if line.startswith("."):
            parts = line.split(None, 1)
            line = parts[1].replace('"', "") if len(parts) > 1 else ""
        lines.append(line)
    return " ".join(lines)


def page_entries(path):
    """{key: (section, the entry's words)} of the number keys (".BI key N")
    of GLOBAL KEYS and COMPARTMENT KEYS; an entry's nested .RS list is its."""
    entries, section, key, body, nested = {}, None, None, [], 0

    def close():
        # A key of both sections (hold_wait_ms) is judged by its fuller entry.
        text = plain("\n".join(body))
        if key and (key not in entries or facts(text)[0] and not facts(entries[key][1])[0]):
            entries[key] = (section, text)

    lines = open(path).read().splitlines()
    for i, line in enumerate(lines):
        nested += (line == ".RS") - (line == ".RE")
        if line.startswith(".SH "):
            close()
            key, body = None, []
            section = {".SH GLOBAL KEYS": "global",
                       ".SH COMPARTMENT KEYS": "compartment"}.get(line)
        elif section and not nested and (line in (".TP", ".PP") or line.startswith(".SS ")):
            close()
            key, body = None, []
        elif section and lines[i - 1] == ".TP" and re.match(r'\.BI [a-z_]+ " N"$', line):
            key = line.split()[1]
        elif key:
            body.append(line)
    close()
    return entries


def example_entries(path):
    """{key: words} of the example's comments: "; key: ..." or ";   key  ..."."""
    entries, key, body = {}, None, []
    for line in open(path):
        m = re.match(r";( [a-z_]+:|   [a-z_]+\b)(.*)", line)
        if m and re.fullmatch(r"[a-z_]+", m.group(1).strip(" :")):
            if key:
                entries.setdefault(key, " ".join(body))
            key, body = m.group(1).strip(" :"), [m.group(2)]
        elif key and line.startswith(";      "):
            body.append(line[1:].strip())
        else:
            if key:
                entries.setdefault(key, " ".join(body))
            key, body = None, []
    return entries


def facts(text):
    spans = [tuple(int(n.replace(",", "")) for n in m.groups()) for m in RANGE.finditer(text)]
    span = max(spans, key=lambda s: s[1] - s[0]) if spans else None
    default = DEFAULT.search(text)
    return span, default.group(1).lower() if default else None


def check_says(bulkhead, section, key, value, scratch):
    rules = os.path.join(scratch, "rules.ini")
    context = CONTEXT.get(key, "")
    with open(rules, "w") as f:
        if section == "global":
            f.write(f"[global]\n{key} = {value}\n[c]\nlimit = 1\nmatch = 127.0.0.1:1\n")
        else:
            base = "" if key == "limit" else "limit = 32767\n"
            f.write(f"[c]\n{base}match = 127.0.0.1:1\n{key} = {value}\n{context}\n")
    out = subprocess.run([bulkhead, "check", rules], capture_output=True, text=True)
    return [l for l in out.stderr.splitlines() if f" {key}: " in l]


def main():
    page = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "man/bulkhead.ini.5")
    example = sys.argv[2] if len(sys.argv) > 2 else os.path.join(TOP, "rules.ini.example")
    bulkhead = os.path.join(TOP, "build/bulkhead")
    problems = []
    documented, annotated = page_entries(page), example_entries(example)
    with tempfile.TemporaryDirectory() as scratch:
        for key, (section, text) in sorted(documented.items()):
            span, default = facts(text)
            if key in annotated:
                other_span, other_default = facts(annotated[key])
                if other_span and other_span != span:
                    problems.append(f"{key}: {page} says {span}, {example} says {other_span}")
                if other_default and default and other_default != default:
                    problems.append(f"{key}: {page} says default {default}, "
                                    f"{example} says default {other_default}")
            if not span or key.startswith("fleet"):
                continue
            if check_says(bulkhead, section, key, span[1], scratch):
                problems.append(f"{key}: {page} says up to {span[1]}, but check refuses it")
            if not any("out of range" in l for l in
                       check_says(bulkhead, section, key, span[1] + 1, scratch)):
                problems.append(f"{key}: {page} says up to {span[1]}, but check takes "
                                f"{span[1] + 1}")
    for problem in problems:
        print(f"check-key-facts: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
