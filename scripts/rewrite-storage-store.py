#!/usr/bin/env python3
"""One-off helper of the storage.Store -> *storage.Store rewrite (issue 28);
delete it once every branch is merged.

Run after `gofmt -r 'storage.Store -> *storage.Store' -w` and after the
wrapper types embed driver.Store: it compiles the packages given (go test
-run ^$ -gcflags=-e) and, where a value that is not a *storage.Store is
passed as one (a test wrapper, a fault store, a counting store), wraps the
expression in storage.New(...); where such a value is asked for List,
Watch, SettleTime, AtomicConditionalDelete or Close, it wraps the receiver.
It handles one-line expressions only; the rest it leaves to the compiler's
messages. Then run goimports on the files it changed.

    python3 scripts/rewrite-storage-store.py ./...
"""
import re
import subprocess
import sys

CANNOT_USE = re.compile(r'^(?:vet: )?(\S+\.go):(\d+):(\d+): cannot use (.+?) \((?:variable|value) of '
                        r'(?:type|interface type|struct type) (\S+)\) as \*storage\.Store value', re.M)
NO_METHOD = re.compile(r'^(?:vet: )?(\S+\.go):(\d+):(\d+): (\S+)\.(List|Watch|SettleTime|AtomicConditionalDelete|Close) '
                       r'undefined \(type (\S+) has no field or method', re.M)


def expr_end(line, i):
    depth = 0
    while i < len(line):
        c = line[i]
        if c in '([{':
            depth += 1
        elif c in ')]}':
            if depth == 0:
                return i
            depth -= 1
        elif c == ',' and depth == 0:
            return i
        elif c == '"':
            i += 1
            while i < len(line) and line[i] != '"':
                i += 2 if line[i] == '\\' else 1
        i += 1
    return i


def main(pkgs):
    for _ in range(40):
        out = subprocess.run(['go', 'test', '-count=1', '-run', '^$', '-gcflags=-e'] + pkgs,
                             stderr=subprocess.STDOUT, stdout=subprocess.PIPE, text=True).stdout
        hits = [(f, int(l), int(c), 'wrap') for f, l, c, _, t in CANNOT_USE.findall(out)
                if not t.startswith('*storage.Store')]
        hits += [(f, int(l), int(c), 'recv:' + r) for f, l, c, r, _, _ in NO_METHOD.findall(out)]
        if not hits:
            break
        changed = False
        for f, l, c, kind in sorted(set(hits), key=lambda h: (h[0], h[1], -h[2])):
            lines = open(f).read().split('\n')
            line, i = lines[l - 1], c - 1
            if kind == 'wrap':
                e = expr_end(line, i)
                if line[i:e].startswith('storage.New('):
                    continue
                lines[l - 1] = line[:i] + 'storage.New(' + line[i:e] + ')' + line[e:]
            else:
                recv = kind[5:]
                j = line.rfind(recv + '.', 0, i + len(recv) + 1)
                if j < 0:
                    continue
                lines[l - 1] = line[:j] + 'storage.New(' + recv + ')' + line[j + len(recv):]
            open(f, 'w').write('\n'.join(lines))
            changed = True
        if not changed:
            break
    print(out[:6000])


if __name__ == '__main__':
    main(sys.argv[1:] or ['./...'])
