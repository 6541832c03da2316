#!/usr/bin/env python3
"""check-docs: every link in the Markdown docs resolves, and every command
block marked runnable runs as written.

    scripts/check-docs.py [--root DIR] [FILE.md ...]

Default files: README.md and docs/**/*.md under the root (default: the
checkout this script is in).

Links: [text](target) and [text]: target. A relative target must name a
file or directory that exists, taken from the linking file's directory;
its #anchor, if any, must be a heading of that file (GitHub's slugs: lower
case, punctuation dropped, spaces to hyphens, -1, -2... for repeats). A
bare #anchor is looked up in the linking file. http(s) and mailto targets
are not fetched: there is no network in the tests.

Runnable blocks: a fenced block whose info string has the word "run" after
the language (```sh run). Each runs on its own under `bash -e -o pipefail`
from the root, with the root's build/ first on PATH (so `bulkhead` is the
one just built), and must exit 0 within --timeout seconds (default 60).

Prints one line per problem, FILE:LINE: what; exits 1 if there was any.
Ends with "N passed, N failed" over the links and blocks checked.
"""
import argparse
import os
import re
import subprocess
import sys
import unicodedata

FENCE = re.compile(r'^(\s*)(`{3,}|~{3,})(.*)$')
INLINE_LINK = re.compile(r'(?<!!)\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
IMAGE_LINK = re.compile(r'!\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
REFERENCE = re.compile(r'^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$')
HEADING = re.compile(r'^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$')
CODE_SPAN = re.compile(r'`+[^`]*`+')


def slug(text):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r'<[^>]+>', '', text)              # inline HTML
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)  # links: their text
    text = text.replace('`', '').lower()
    kept = ''.join(c for c in text
                   if c in ' -_' or unicodedata.category(c)[0] in 'LN')
    return kept.replace(' ', '-')


def blocks_and_prose(lines):
    """Yields (kind, line_number, payload): ('prose', n, text) for each run
    of lines outside fences (joined by newlines: a link's text may wrap),
    ('block', n, (info, body)) for each fenced block."""
    fence, prose, start = None, [], 1
    for number, line in enumerate(lines, 1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                if prose:
                    yield 'prose', start, '\n'.join(prose)
                fence, prose = (match.group(2), match.group(3).strip(), number, []), []
            else:
                if not prose:
                    start = number
                prose.append(line)
        elif match and match.group(2).startswith(fence[0]) and not match.group(3).strip():
            yield 'block', fence[2], (fence[1], fence[3])
            fence = None
        else:
            fence[3].append(line)
    if fence is not None:
        yield 'block', fence[2], (fence[1], fence[3])
    elif prose:
        yield 'prose', start, '\n'.join(prose)


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        with open(path, encoding='utf-8') as f:
            for kind, _, text in blocks_and_prose(f.read().splitlines()):
                for line in text.splitlines() if kind == 'prose' else []:
                    match = HEADING.match(line)
                    if not match:
                        continue
                    base = slug(match.group(2))
                    count = seen.get(base, 0)
                    seen[base] = count + 1
                    found.add(base if count == 0 else f'{base}-{count}')
        cache[path] = found
    return cache[path]


def check_link(root, source, target):
    """None when target resolves from source, else why not."""
    if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):
        return None  # http, https, mailto, man: not fetched
    path, _, anchor = target.partition('#')
    resolved = source if not path else os.path.normpath(
        os.path.join(os.path.dirname(source), path))
    if not os.path.exists(resolved):
        return f'{target}: no such file'
    if anchor and resolved.endswith('.md') and os.path.isfile(resolved):
        if anchor.lower() not in anchors(resolved):
            return f'{target}: no heading #{anchor} in {os.path.relpath(resolved, root)}'
    return None


def run_block(root, body, timeout):
    env = dict(os.environ)
    env['PATH'] = os.path.join(root, 'build') + os.pathsep + env.get('PATH', '')
    try:
        done = subprocess.run(['bash', '-e', '-o', 'pipefail', '-c', '\n'.join(body)],
                              cwd=root, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f'did not finish in {timeout} s'
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return f'exit {done.returncode}' + (f': {said[-1]}' if said else '')
    return None


def check_file(root, path, timeout, problems):
    checked = 0
    with open(path, encoding='utf-8') as f:
        lines = f.read().splitlines()
    for kind, number, payload in blocks_and_prose(lines):
        if kind == 'prose':
            # Code spans blanked, their newlines kept, so lines still count.
            prose = CODE_SPAN.sub(lambda m: re.sub(r'[^\n]', ' ', m.group()), payload)
            found = [(m.start(), m.group(1)) for pattern in (INLINE_LINK, IMAGE_LINK)
                     for m in pattern.finditer(prose)]
            offset = 0
            for line in prose.split('\n'):
                reference = REFERENCE.match(line)
                if reference:
                    found.append((offset, reference.group(1)))
                offset += len(line) + 1
            for at, target in sorted(found):
                checked += 1
                why = check_link(root, path, target)
                if why:
                    line = number + prose.count('\n', 0, at)
                    problems.append(f'{os.path.relpath(path, root)}:{line}: link {why}')
        else:
            info, body = payload
            words = info.split()
            if len(words) > 1 and 'run' in words[1:]:
                checked += 1
                why = run_block(root, body, timeout)
                if why:
                    problems.append(f'{os.path.relpath(path, root)}:{number}: runnable block: {why}')
    return checked


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--root', default=here)
    parser.add_argument('--timeout', type=int, default=60)
    parser.add_argument('files', nargs='*')
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    files = [os.path.abspath(f) for f in args.files]
    if not files:
        files = [os.path.join(root, 'README.md')]
        for directory, _, names in sorted(os.walk(os.path.join(root, 'docs'))):
            files += [os.path.join(directory, n) for n in sorted(names) if n.endswith('.md')]
    problems, checked = [], 0
    for path in files:
        if not os.path.isfile(path):
            checked += 1
            problems.append(f'{path}: no such file')
            continue
        checked += check_file(root, path, args.timeout, problems)
    for problem in problems:
        print(problem)
    print(f'{checked - len(problems)} passed, {len(problems)} failed')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
