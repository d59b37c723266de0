#!/usr/bin/env python3
"""Extracts one article from a WikiText raw file as plain prose (the demo document in data/).

WikiText splits punctuation into tokens (" , ", " @-@ ", " @,@ "); this joins them back and turns the
" = = Heading = = " lines into plain headings. Usage:
    python3 tools/wikitext_article.py WIKI.test.raw "1933 Treasure Coast hurricane" > OUT.txt
"""
import re
import sys


def detokenize(s: str) -> str:
    s = s.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    s = re.sub(r" ([,.;:!?%)\]])", r"\1", s)
    s = re.sub(r"([(\[$]) ", r"\1", s)
    s = s.replace(" 's", "'s").replace(" n't", "n't").replace(" 'd", "'d")
    s = re.sub(r'" (.*?) "', r'"\1"', s)
    return s.strip()


def main() -> None:
    path, title = sys.argv[1], sys.argv[2]
    lines = open(path, encoding="utf-8").read().replace("\r", "").split("\n")
    heads = [k for k, line in enumerate(lines) if detokenize(line.strip().strip("=").strip()) == title
             and re.match(r"^ = [^=].* = $", line)]
    if not heads:
        sys.exit(f"error: no article titled '{title}' in {path}")
    out = [title, ""]
    for line in lines[heads[0] + 1:]:
        if re.match(r"^ = [^=].* = $", line):
            break
        m = re.match(r"^ (?:= )+(.*?)(?: =)+ $", line)
        if m:
            out += ["", detokenize(m.group(1))]
        elif line.strip():
            out.append(detokenize(line))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
