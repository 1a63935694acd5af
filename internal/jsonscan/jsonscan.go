// Package jsonscan holds the two steps every one-pass JSON reader of the
// hot path shares: skipping whitespace and checking a string. Those
// readers (mcp's request envelope, capabilities' flat arguments) hand
// anything they do not read in one pass to encoding/json; these steps
// accept exactly the strings encoding/json accepts.
package jsonscan

// Space returns the index of the first byte at or after i that is not
// JSON whitespace.
func Space(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// String checks the JSON string at b[i] (which is '"') and returns the
// index after its closing quote, or -1 when it is not valid JSON: a
// control character, a bad escape or no closing quote. plain reports that
// it holds printable ASCII only, without escapes, so its bytes are its
// value.
func String(b []byte, i int) (end int, plain bool) {
	plain = true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, plain
		case c < 0x20:
			return -1, false
		case c >= 0x7f:
			plain = false
		case c == '\\':
			plain = false
			j++
			if j >= len(b) {
				return -1, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) {
					return -1, false
				}
				for _, h := range b[j+1 : j+5] {
					if !isHex(h) {
						return -1, false
					}
				}
				j += 4
			default:
				return -1, false
			}
		}
	}
	return -1, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
