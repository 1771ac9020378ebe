"""Apply the module moves in map.txt: git mv, new package __init__ files, and every import path that follows.

    python scripts/layout/relayout.py REPO [--files F ...]   (with --files: only rewrite those files' text, no moves)
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

MAP = {}
for line in Path(__file__).with_name("map.txt").read_text().splitlines():
    if line.strip() and not line.startswith("#"):
        old, new = line.split()
        MAP["kvfence." + old] = "kvfence." + new

DOTTED = re.compile(r"(?<![\w.])(" + "|".join(re.escape(k) for k in sorted(MAP, key=len, reverse=True)) + r")(?![\w])")
PATHS = {k.replace(".", "/") + ".py": v.replace(".", "/") + ".py" for k, v in MAP.items()}
PATHRE = re.compile(r"(?<![\w/])(" + "|".join(re.escape(k) for k in sorted(PATHS, key=len, reverse=True)) + r")")
FROM = re.compile(r"^(?P<indent>[ \t]*)from (?P<pkg>kvfence(?:\.\w+)*) import (?P<names>[^()\n#]+?)(?P<tail>[ \t]*(?:#.*)?)$", re.M)
FROM_PAREN = re.compile(r"^(?P<indent>[ \t]*)from (?P<pkg>kvfence(?:\.\w+)*) import \((?P<names>[^)]*)\)(?P<tail>[ \t]*(?:#.*)?)$", re.M)


SENTINEL = "kvfence\x00"


def split_from(m: re.Match[str]) -> str:
    pkg, indent = m["pkg"], m["indent"]
    items = [n.strip() for n in m["names"].replace("\n", " ").split(",") if n.strip()]
    moved: dict[str, list[str]] = {}
    kept: list[str] = []
    for item in items:
        name = item.split(" as ")[0].strip()
        full = f"{pkg}.{name}"
        if full in MAP:
            parent, _, leaf = MAP[full].rpartition(".")
            alias = item.split(" as ")[1].strip() if " as " in item else None
            if leaf != name and alias is None:
                alias = name
            moved.setdefault(parent, []).append(leaf + (f" as {alias}" if alias and alias != leaf else ""))
        else:
            kept.append(item)
    if not moved:
        return m.group(0)
    lines = []
    if kept:
        lines.append(f"{indent}from {pkg} import {', '.join(kept)}")
    for parent, names in moved.items():
        lines.append(f"{indent}from {parent.replace('kvfence.', SENTINEL, 1)} import {', '.join(names)}")
    lines[0] += m["tail"]
    return "\n".join(lines)


def rewrite(text: str) -> str:
    text = FROM_PAREN.sub(split_from, text)
    text = FROM.sub(split_from, text)
    text = DOTTED.sub(lambda m: MAP[m.group(1)], text)
    text = PATHRE.sub(lambda m: PATHS[m.group(1)], text)
    return text.replace(SENTINEL, "kvfence.")


def main() -> None:
    repo = Path(sys.argv[1])
    if "--files" in sys.argv:
        files = [Path(f) for f in sys.argv[sys.argv.index("--files") + 1 :]]
    else:
        src = repo / "src"
        for old, new in MAP.items():
            o = src / (old.replace(".", "/") + ".py")
            n = src / (new.replace(".", "/") + ".py")
            n.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "-C", str(repo), "mv", str(o), str(n)], check=True)
        for new in MAP.values():
            d = src / new.replace(".", "/")
            for pkg in [d.parent, *d.parent.parents]:
                if pkg == src / "kvfence" or pkg == src:
                    break
                init = pkg / "__init__.py"
                if not init.exists():
                    dotted = ".".join(pkg.relative_to(src).parts)
                    init.write_text(f'"""{dotted}."""\n')
                    subprocess.run(["git", "-C", str(repo), "add", str(init)], check=True)
        out = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True, check=True).stdout
        files = [repo / f for f in out.split() if f.endswith((".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".cfg", ".txt", ".ini")) or f.endswith("Makefile")]
    for f in files:
        if not f.is_file():
            continue
        try:
            text = f.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite(text)
        if new != text:
            f.write_text(new)


if __name__ == "__main__":
    main()
