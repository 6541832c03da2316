#!/usr/bin/env python3
"""Refuses calls that go round between the files of one room.

    scripts/room-calls.py TOP ROOM...

Within a room (a folder of .c files: shim/permits, cli/supervisor), files
call only those below them, so the room reads from the bottom up. This
finds each set of files whose calls go round (a strongly connected set of
the graph "file calls a function another file defines") and prints one
line for it; exit 1 if any. It reads the source, not objects: a function
is defined where a line at column 0 that is not static opens its body,
and called wherever its name is followed by "(" outside comments and
strings. Static functions cannot be called from another file and are left
out; so is a name two files define (which the linker would refuse).
"""
import glob
import os
import re
import sys

NOT_NAMES = {"if", "for", "while", "switch", "return", "sizeof", "defined",
             "__attribute__", "__builtin_expect", "typeof", "alignof",
             "offsetof"}
DEFINITION = re.compile(
    r"^(?!static\b|#|typedef\b|extern\b)[A-Za-z_][^;{}()=]*?"
    r"\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{", re.M)
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def code_of(path):
    """The file with comments and string and character literals blanked."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"),
                  text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", text)


def call_graph(files):
    """{caller: {callee: [names]}} between the files."""
    code = {f: code_of(f) for f in files}
    owner = {}
    for f, text in code.items():
        for name in DEFINITION.findall(text):
            if name not in NOT_NAMES:
                owner[name] = f
    edges = {}
    for f, text in code.items():
        for name in set(CALL.findall(text)):
            callee = owner.get(name)
            if callee and callee != f:
                edges.setdefault(f, {}).setdefault(callee, []).append(name)
    return edges


def circles(files, edges):
    """The sets of two or more files whose calls go round (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            member = None
            component = []
            while member != v:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
            if len(component) > 1:
                found.append(sorted(component))

    for f in files:
        if f not in index:
            visit(f)
    return found


def main():
    top, rooms = sys.argv[1], sys.argv[2:]
    failures = 0
    for room in rooms:
        files = sorted(glob.glob(os.path.join(top, room, "*.c")))
        edges = call_graph(files)
        for circle in circles(files, edges):
            calls = ["%s calls %s (%s)" % (os.path.basename(a), os.path.basename(b),
                                           ", ".join(sorted(edges[a][b])[:3]))
                     for a in circle for b in circle if b in edges.get(a, {})]
            print("check-rooms: %s/: calls go round: %s" % (room, "; ".join(calls)),
                  file=sys.stderr)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
