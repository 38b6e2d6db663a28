// Package jsonenctest holds what the tests of the hand-written JSON encoders
// share: strings that must be quoted exactly as encoding/json quotes them.
package jsonenctest

import "strings"

// Hostile are strings an encoder must quote exactly as encoding/json does:
// braces, globs and colons, quotes and backslashes, HTML, control
// characters, line separators, invalid and truncated UTF-8, a surrogate, the
// replacement character and a long value.
var Hostile = []string{
	"", "t-1", "tenant-{x}:*?[a]", "a\"b\\c", "<script>&amp;</script>",
	"\x00\x01\x1f\x7f", "\b\f\n\r\t", "\u2028\u2029", "héllo wörld ✓ 🚀",
	"\xff\xfe bad utf8 \xc3", "\xe2\x80", "x\xed\xa0\x80y", "\uFFFD", strings.Repeat("ab<", 200),
}
