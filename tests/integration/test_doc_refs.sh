#!/usr/bin/env bash
# test_doc_refs.sh — no dangling references: every repository path that a doc, a comment, a
# config or a claims table names (lib/..., docs/..., experiments/..., a *.md file) exists, and
# nothing sends a reader to a document outside the repository. A path with a placeholder
# (<model>, MODEL, *) is a pattern, not a file, and is not checked; neither are data/cache and
# data/scenes (written on first use), nor paths under
# results/ other than results/reference/ (run files are written, not committed).
set -u
root=${MPX_SOURCE_DIR:?}
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
python3 - "$root" <<'PY'
import os, re, sys
root = sys.argv[1]
TOP = ("lib", "app", "models", "data", "experiments", "plots", "tests", "docs", "cmake", ".ci")
SKIP_DIRS = {".git", "build", "cache", "tsv", "figures", "figdata", "__pycache__"}
TEXT = (".c", ".h", ".cu", ".cuh", ".py", ".sh", ".md", ".cfg", ".tsv", ".list", ".gp", ".cmake",
        ".txt", "Makefile", ".ci/run")
path_re = re.compile(r"(?<![\w./<>$-])((?:%s)/[\w./+-]*[\w+-])([*{<\[$]?)" % "|".join(re.escape(t) for t in TOP + ("results/reference",)))
md_re = re.compile(r"(?<![\w/.<>-])([A-Za-z][\w-]*\.md)\b")
outside = re.compile(r"\b(DESIGN|REFERENCE)\.md\b|\.\./shared/(?!data\b)")

files = []
for d, dirs, names in os.walk(root):
    rel = os.path.relpath(d, root)
    dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not (rel == "." and x == "results")]
    for n in names:
        if n.endswith(TEXT) or n in ("Makefile", "run"):
            files.append(os.path.join(d, n))
files.append(os.path.join(root, "results", "reference", "bench.md"))
for d, dirs, names in os.walk(os.path.join(root, "results", "reference")):
    files += [os.path.join(d, n) for n in names if n.endswith(".md") and os.path.join(d, n) not in files]

md_names = set()
for d, dirs, names in os.walk(root):
    dirs[:] = [x for x in dirs if x not in (".git", "build")]
    md_names.update(n for n in names if n.endswith(".md"))

def exists(p, d):
    """p relative to the repository root, or (an #include) to the citing file's folder or one above."""
    while True:
        if os.path.exists(os.path.join(d, p)):
            return True
        if os.path.samefile(d, root) or d == "/":
            return os.path.exists(os.path.join(root, p))
        d = os.path.dirname(d)

bad = 0
for f in files:
    if f.endswith("test_doc_refs.sh"):
        continue
    try:
        text = open(f, encoding="utf-8").read()
    except (UnicodeDecodeError, OSError):
        continue
    relf = os.path.relpath(f, root)
    for no, line in enumerate(text.splitlines(), 1):
        m = outside.search(line)
        if m:
            print(f"{relf}:{no}: cites '{m.group(0)}', which is outside the repository")
            bad += 1
        for p, glob_after in path_re.findall(line):
            p = p.rstrip(".")
            if glob_after or re.search(r"/[A-Z]+(/|$|\.)", p):
                continue
            if p.startswith("results/") and not p.startswith("results/reference"):
                continue
            if p.startswith(("data/cache", "data/scenes")):
                continue
            if not exists(p, os.path.dirname(f)):
                print(f"{relf}:{no}: names '{p}', which does not exist")
                bad += 1
        for n in ([] if relf.startswith("tests/unit/") else md_re.findall(line)):
            if n not in md_names and not outside.search(n):
                print(f"{relf}:{no}: names '{n}', which is no file of the repository")
                bad += 1
print(f"test_doc_refs: {len(files)} files read, {bad} dangling references")
sys.exit(1 if bad else 0)
PY
