#!/usr/bin/env bash
# Checks that the file maps in the docs name what is in the tree, so that a
# reader can trust them:
#  - every folder README.md with a file map (a table headed "| file |" or
#    "| folder |", or bullets "- `name.cc`: ...") names only files and
#    folders that exist (in its folder, or as a path from the repository
#    root), and names every source file of its folder;
#  - the top-level README's "Layout" block names existing folders;
#  - docs/MODELS.md's tables name existing files (bare names are in
#    engine/model/).
# Prints each mismatch and exits 1 if there is any. Run from anywhere:
#   bash scripts/check_file_maps.sh
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2

mismatches=0
mismatch() {
  echo "$1"
  mismatches=$((mismatches + 1))
}

# The names a README's file map lists, one a line. A cell or bullet head may
# hold several: "`router.h`, `.cc`" and "`a.h/.cc`" are a.h and a.cc,
# "`rotary.{h,cc}`" is rotary.h and rotary.cc; a name followed by arguments
# ("`make.py DIR`") is its first word. Bullets count only when they name a
# source file or a folder, so that bullets describing a file format
# ("- `specials.json`: ...") are not taken for a map.
listed_names() {
  awk '
    function stem(s) { sub(/\.[^.\/]*$/, "", s); return s }
    function emit(name, is_bullet,   brace, pre, post, alts, n, i) {
      if (is_bullet && name !~ /\.(h|cc|c|capnp|inc|py|sh|cmake)$/ &&
          name != "CMakeLists.txt" && name !~ /\/$/) return
      if (match(name, /\{[^}]*\}/)) {
        pre = substr(name, 1, RSTART - 1)
        post = substr(name, RSTART + RLENGTH)
        n = split(substr(name, RSTART + 1, RLENGTH - 2), alts, ",")
        for (i = 1; i <= n; i++) print pre alts[i] post
        return
      }
      print name
    }
    function names(text, is_bullet,   t, prev, word, slash) {
      prev = ""
      while (match(text, /`[^`]+`/)) {
        t = substr(text, RSTART + 1, RLENGTH - 2)
        text = substr(text, RSTART + RLENGTH)
        if (t ~ / /) {
          if (!is_bullet) continue
          split(t, word, " ")
          t = word[1]
        }
        if (t ~ /^\./ && prev != "") t = stem(prev) t
        slash = index(t, "/.")
        if (slash > 0) {
          emit(substr(t, 1, slash - 1), is_bullet)
          t = stem(substr(t, 1, slash - 1)) substr(t, slash + 1)
        }
        emit(t, is_bullet)
        prev = t
      }
    }
    /^\| *(file|folder) *\|/ { in_table = 1; next }
    in_table && /^\|[- |]*$/ { next }
    in_table && /^\|/ { split($0, cell, "|"); names(cell[2], 0); next }
    { in_table = 0 }
    /^- `/ {
      head = $0
      sub(/`: .*$/, "`", head)
      sub(/`:$/, "`", head)
      if (head != $0) names(head, 1)
    }
  ' "$1"
}

# Folder READMEs: the files git knows or would add (so no build tree's), or
# outside a git checkout every README but those under build*/.
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  readmes=$(git ls-files --cached --others --exclude-standard \
    'README.md' '*/README.md' | sort -u)
else
  readmes=$(find . \( -name .git -o -name 'build*' \) -prune -o \
    -name README.md -print | sed 's|^\./||' | sort)
fi

for readme in $readmes; do
  [ "$readme" = README.md ] && continue
  dir=$(dirname "$readme")
  names=$(listed_names "$readme")
  [ -z "$names" ] && continue

  # (a) every name it lists exists.
  while IFS= read -r name; do
    [ -z "$name" ] && continue
    if [[ "$name" == *'*'* ]]; then
      compgen -G "$dir/$name" > /dev/null ||
        mismatch "$readme: lists $name, which matches nothing in $dir/"
    elif [ ! -e "$dir/$name" ] && { [[ "$name" != */* ]] || [ ! -e "$name" ]; }; then
      mismatch "$readme: lists $name, which is not in $dir/"
    fi
  done <<< "$names"

  # (b) every source file of the folder is listed.
  for file in "$dir"/*.h "$dir"/*.cc "$dir"/*.c "$dir"/*.capnp "$dir"/*.inc \
      "$dir"/*.py "$dir"/*.sh "$dir"/*.cmake; do
    [ -f "$file" ] || continue
    base=$(basename "$file")
    grep -qxF "$base" <<< "$names" ||
      mismatch "$readme: does not list $base"
  done
done

# The top-level README's Layout block: the folder at the start of each line.
layout=$(awk '
  /^## Layout/ { in_section = 1; next }
  in_section && /^## / { exit }
  in_section && /^```/ { in_block = !in_block; next }
  in_block && /^[A-Za-z0-9_.-]+\// { split($0, word, "/"); print word[1] }
' README.md)
[ -z "$layout" ] && mismatch "README.md: no Layout block found"
for folder in $layout; do
  [ -d "$folder" ] || mismatch "README.md: Layout names $folder/, which does not exist"
done

# docs/MODELS.md: file names in its tables (`engine/model/x.cc`, or a bare
# `x.cc` / `rotary.{h,cc}`, which is engine/model's).
# shellcheck disable=SC2016  # the backquotes are Markdown's, not the shell's
model_files=$(grep '^|' docs/MODELS.md |
  grep -oE '`[A-Za-z0-9_./{},-]+\.(h|cc|\{h,cc\})`' | tr -d '`' | sort -u)
for name in $model_files; do
  if [[ "$name" == *'{h,cc}' ]]; then
    candidates="${name%\{h,cc\}}h ${name%\{h,cc\}}cc"
  else
    candidates=$name
  fi
  for file in $candidates; do
    [[ "$file" == */* ]] || file="engine/model/$file"
    [ -e "$file" ] || mismatch "docs/MODELS.md: names $file, which does not exist"
  done
done

if [ "$mismatches" -gt 0 ]; then
  echo "check_file_maps: $mismatches mismatches"
  exit 1
fi
echo "check_file_maps: every file map matches the tree"
