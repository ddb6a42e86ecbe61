#!/usr/bin/env python3
"""Checks the /ui/ page's DOM as headless Chromium left it (--dump-dom) against the scheduler's own JSON.

    ui_check.py DOM.html OVERVIEW.json [--refused NS/POD REASON] [--explained NS/POD TEXT]
                [--shape NAME FITS] [--text TEXT]...

Prints one "ok: ..." or "bad: ..." line per check; exits 1 if any is bad. Checks, besides the options':
the page drew (body data-state="ready"); its totals equal the overview's (the ledger's); no element came
from a name (no <img>, <script> or inline handler in the page, which has none of its own); and the title
is the page's own (a script run by a name would have changed it).
"""
import json
import sys
from html.parser import HTMLParser


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.state = None
        self.title = ""
        self.by_id = {}  # id -> text inside
        self.rows = {}  # data-pod or data-shape -> text inside
        self.cells = {}  # data-pod or data-shape -> the text of each of its cells
        self.tags = set()
        self.scripts = 0
        self.handlers = []
        self._open = []  # [(tag, key)] of elements whose text is collected
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        self.scripts += tag == "script"
        self.handlers += [k for k in a if k.startswith("on")]
        if tag == "body":
            self.state = a.get("data-state")
        if tag == "title":
            self._in_title = True
        key = None
        if "id" in a:
            key = ("id", a["id"])
            self.by_id[a["id"]] = ""
        elif tag == "tr" and ("data-pod" in a or "data-shape" in a):
            name = a.get("data-pod") or a["data-shape"]
            key = ("row", name)
            self.rows[name] = ""
            self.cells[name] = []
        if tag == "td":
            row = next((k for _, k in reversed(self._open) if k and k[0] == "row"), None)
            if row:
                self.cells[row[1]].append("")
        self._open.append((tag, key))

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        while self._open:
            t, _ = self._open.pop()
            if t == tag:
                break

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        for _, key in self._open:
            if key is None:
                continue
            kind, name = key
            if kind == "id":
                self.by_id[name] += data
            else:
                self.rows[name] += data
                if self.cells[name]:
                    self.cells[name][-1] += data


def main(argv):
    dom, overview_file, rest = argv[1], argv[2], argv[3:]
    page = Page()
    with open(dom, encoding="utf-8") as f:
        page.feed(f.read())
    with open(overview_file, encoding="utf-8") as f:
        overview = json.load(f)
    failed = 0

    def check(cond, what):
        nonlocal failed
        print(("ok: " if cond else "bad: ") + what)
        failed += 0 if cond else 1

    check(page.state == "ready", f"the page drew the scheduler's answers (data-state={page.state!r})")
    for element, field in (("total-nodes", "nodes"), ("total-pods", "pods"), ("total-refused", "podsRefused")):
        shown = page.by_id.get(element, "").strip()
        check(shown == str(overview[field]), f"{element} shows {shown!r}, the ledger {overview[field]}")
    made = sorted(page.tags & {"img", "iframe", "object", "embed"})
    check(not made and page.scripts == 1,
          f"no element made from a name (found {made or 'none'}, {page.scripts} script element: the page's own)")
    check(not page.handlers, "no inline event handler in the page: " + ",".join(page.handlers))
    check(page.title == "hami-scheduler: devices", f"the title is the page's own ({page.title!r})")
    i = 0
    while i < len(rest):
        opt = rest[i]
        if opt == "--refused":
            pod, reason = rest[i + 1], rest[i + 2]
            row = page.rows.get(pod, "")
            check(reason in row, f"the refused pod {pod} shows {reason!r}: {row[:300]!r}")
            i += 3
        elif opt == "--explained":
            pod, text = rest[i + 1], rest[i + 2]
            body = page.by_id.get("explanation", "")
            check(f"Why {pod} is pending" in body and text in body,
                  f"the explanation of {pod} says {text!r}: {body[:300]!r}")
            i += 3
        elif opt == "--shape":
            shape, fits = rest[i + 1], rest[i + 2]
            row = page.rows.get(shape, "")
            shown = (page.cells.get(shape) or [None])[-1]
            check(shown == fits, f"free capacity: {shape} shows {shown!r}, the scheduler {fits} still fit")
            i += 3
        elif opt == "--text":
            text = rest[i + 1]
            body = "".join(page.by_id.values())
            check(text in body, f"the page shows {text!r} as text")
            i += 2
        else:
            print(f"bad: unknown option {opt}")
            return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
