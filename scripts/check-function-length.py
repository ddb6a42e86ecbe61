#!/usr/bin/env python3
"""Lists every function body longer than a limit in the given folders' C++ files, and fails when there is one.

Usage: scripts/check-function-length.py [--max N] ROOT FOLDER...

A function is a brace block whose opening follows a parameter list (`) {`, `) const {`, `) -> T {`, a
constructor's initializer list), outside another function; lambdas and blocks inside a function count as
part of it. Comments, strings and character literals are blanked first so braces in them do not count. The
length is the lines from the signature's first line to the closing brace.
"""
import argparse
import pathlib
import re
import sys

CONTROL = re.compile(r"\b(if|for|while|switch|catch|return|else|do)\s*(\(|$)")


def blank(text: str) -> str:
    """Comments, string and char literals replaced by spaces (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path: pathlib.Path):
    """(name, first line, last line) of each function defined at namespace or class level."""
    text = blank(path.read_text())
    line_of = [0] * (len(text) + 1)
    line = 1
    for i, ch in enumerate(text):
        line_of[i] = line
        if ch == "\n":
            line += 1
    stack = []  # per open brace: True when it opens a function body (or is inside one)
    head_start = 0  # where the text before the next brace at this level starts
    for i, ch in enumerate(text):
        if ch == "{":
            inside = bool(stack) and stack[-1][0]
            head = text[head_start:i]
            is_function = False
            if not inside:
                sig = head.strip()
                sig_flat = " ".join(sig.split())
                if re.search(r"\)\s*(const|noexcept|override|final|mutable|&|&&|\s)*$", sig_flat) or re.search(
                    r"\)\s*(const\s*)?->\s*[\w:<>,\s*&]+$", sig_flat) or re.search(
                    r"\)\s*:\s*[\w:]+[({]", sig_flat):
                    is_function = not CONTROL.search(sig_flat.split("(")[0] + "(") and not re.match(
                        r"^(namespace|class|struct|enum|union)\b", sig_flat)
            if is_function:
                name_match = re.search(r"([~\w:]+(?:<[^()]*>)?)\s*\(", head)
                name = name_match.group(1) if name_match else "?"
                start = head_start + (len(head) - len(head.lstrip()))
                stack.append((True, name, line_of[start]))
            else:
                stack.append((inside, None, None))
            head_start = i + 1
        elif ch == "}":
            if stack:
                inside, name, first = stack.pop()
                if name is not None:
                    yield name, first, line_of[i]
            head_start = i + 1
        elif ch == ";" and not (stack and stack[-1][0]):
            head_start = i + 1
        elif ch == ":" and not (stack and stack[-1][0]) and re.search(r"\b(public|private|protected)\s*$",
                                                                        text[head_start:i]):
            head_start = i + 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max", type=int, default=80)
    parser.add_argument("root")
    parser.add_argument("folders", nargs="+")
    args = parser.parse_args()
    root = pathlib.Path(args.root)
    long = []
    for folder in args.folders:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".cc", ".h"):
                continue
            for name, first, last in functions(path):
                if last - first + 1 > args.max:
                    long.append((last - first + 1, f"{path.relative_to(root)}:{first}", name))
    for length, where, name in sorted(long, reverse=True):
        print(f"{length:5} lines  {where}  {name}")
    if long:
        print(f"{len(long)} function(s) over {args.max} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
