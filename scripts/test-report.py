#!/usr/bin/env python3
"""The closing report of `make test` and `make check` (docs/testing.md).

test-report.py [--wall SECONDS] XUNIT_FILE...

Reads the xUnit files `swift test --xunit-output` wrote (one per run of scripts/run-tests.sh; `make test` makes two,
the in-process targets' beside the release build and then the rest) and prints the 20 slowest tests, the time per test target
(summed over its tests: with parallel workers the sum exceeds the wall time), the failed tests, and last a plain
closing line `tests: N passed, N failed`. Exits 1 when a test failed or the file holds no test, else 0.
"""
import sys
import xml.etree.ElementTree as ElementTree


def main():
    arguments = sys.argv[1:]
    wall = None
    if arguments[:1] == ["--wall"] and len(arguments) >= 2:
        wall = float(arguments[1])
        arguments = arguments[2:]
    if not arguments:
        print("usage: " + __doc__.strip().splitlines()[2], file=sys.stderr)
        return 64
    cases = []
    for path in arguments:
        try:
            root = ElementTree.parse(path).getroot()
        except (OSError, ElementTree.ParseError) as error:
            print(f"test-report: cannot read {path} ({error}): did swift test run?", file=sys.stderr)
            print("tests: 0 passed, 1 failed")
            return 1
        for case in root.iter("testcase"):
            name = f"{case.get('classname', '?')}/{case.get('name', '?')}"
            seconds = float(case.get("time") or 0)
            failed = case.find("failure") is not None or case.find("error") is not None
            cases.append((name, seconds, failed))

    print("\n== the 20 slowest tests ==")
    for name, seconds, _ in sorted(cases, key=lambda case: -case[1])[:20]:
        print(f"{seconds:8.1f} s  {name}")

    targets = {}
    for name, seconds, _ in cases:
        target = name.split(".", 1)[0]
        count, total = targets.get(target, (0, 0.0))
        targets[target] = (count + 1, total + seconds)
    print("\n== time per target (sum of its tests) ==")
    for target, (count, total) in sorted(targets.items(), key=lambda item: -item[1][1]):
        print(f"{total:8.1f} s  {count:4d} tests  {target}")
    total = sum(seconds for _, seconds, _ in cases)
    print(f"{total:8.1f} s  {len(cases):4d} tests  in all" + (f" ({wall:.0f} s wall)" if wall is not None else ""))

    failed = [name for name, _, failed in cases if failed]
    if failed:
        print("\n== failed ==")
        for name in failed:
            print(f"  {name}")
    passed = len(cases) - len(failed)
    # The plain closing line, alone on the last line.
    print(f"tests: {passed} passed, {len(failed)} failed")
    return 1 if failed or not cases else 0


if __name__ == "__main__":
    sys.exit(main())
