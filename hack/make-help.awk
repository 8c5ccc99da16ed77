# `make help`: lists every target the Makefile documents with a `## target: text` line (or
# `## a, b: text` for several), with the first sentence of that text and the `##` lines after it.
function flush() {
	if (names == "") return
	sub(/^ +/, "", text)
	# The first sentence: up to the first ". " (or the whole text).
	if (match(text, /\. /)) text = substr(text, 1, RSTART)
	n = split(names, list, /, */)
	for (i = 1; i <= n; i++) printf "  %-15s %s\n", list[i], text
	names = ""; text = ""
}
BEGIN { print "Targets (`make` alone runs build):" }
# A block of `##` lines starts after a line that is not one; only its first line names targets.
!inblock && /^## [a-z][a-z0-9-]*(, [a-z][a-z0-9-]*)*: / {
	flush()
	inblock = 1
	names = $0; sub(/^## /, "", names); sub(/: .*/, "", names)
	text = $0; sub(/^## [^:]*: /, "", text)
	next
}
/^##/ { inblock = 1; if (names != "") { line = $0; sub(/^## ?/, "", line); text = text " " line }; next }
{ inblock = 0; flush() }
END { flush() }
