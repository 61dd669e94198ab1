#!/usr/bin/env python3
"""Sums the process runs the tests recorded (KEYMGR_TEST_PROFILE=FILE, docs/testing.md): per test, how many
processes it ran and their wall and CPU seconds; per command, the same over all tests.

usage: test-profile.py FILE [N]   (N: how many rows of each table, default 20)"""
import collections
import sys


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 64
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    tests = collections.defaultdict(lambda: [0, 0.0, 0.0])
    commands = collections.defaultdict(lambda: [0, 0.0, 0.0])
    with open(sys.argv[1], encoding="utf-8", errors="replace") as lines:
        for line in lines:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4:
                continue
            wall, cpu, test, command = float(parts[0]), float(parts[1]), parts[2], parts[3]
            words = [word for word in command.split(" ") if word != "--home"]
            key = " ".join(words[:3])
            for table, name in ((tests, test), (commands, key)):
                table[name][0] += 1
                table[name][1] += wall
                table[name][2] += cpu
    for title, table in (("per test", tests), ("per command (first words)", commands)):
        print(f"== process runs {title}: runs, wall s, CPU s ==")
        for name, (count, wall, cpu) in sorted(table.items(), key=lambda item: -item[1][1])[:rows]:
            print(f"  {count:6d} {wall:9.1f} {cpu:9.1f}  {name}")
    count = sum(value[0] for value in tests.values())
    wall = sum(value[1] for value in tests.values())
    cpu = sum(value[2] for value in tests.values())
    print(f"in all: {count} runs, {wall:.1f} s wall, {cpu:.1f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
