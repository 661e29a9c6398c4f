package openapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// splitObject returns the members of the JSON object in data, each value a slice of data. It is what
// json.Unmarshal into a map[string]json.RawMessage returns, in one pass without copying: the merge
// splits documents of megabytes three levels deep, and Unmarshal validates and copies every level
// again. It checks the structure it walks (objects, arrays, strings, nesting); the values it does not
// walk into are validated when the merged document is encoded (json.Encoder compacts every
// RawMessage with a validating scanner), so nothing invalid is ever served. A repeated key keeps the
// last value, as Unmarshal does.
func splitObject(data []byte) (map[string]json.RawMessage, error) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, errors.New("not a JSON object")
	}
	out := map[string]json.RawMessage{}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return out, checkEnd(data, i+1)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return nil, fmt.Errorf("offset %d: want a member name", i)
		}
		end, err := skipString(data, i)
		if err != nil {
			return nil, err
		}
		key, err := decodeKey(data[i:end])
		if err != nil {
			return nil, err
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return nil, fmt.Errorf("offset %d: want ':'", i)
		}
		i = skipSpace(data, i+1)
		vend, err := skipValue(data, i)
		if err != nil {
			return nil, err
		}
		out[key] = data[i:vend:vend]
		i = skipSpace(data, vend)
		if i >= len(data) {
			return nil, errors.New("unexpected end of JSON object")
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return out, checkEnd(data, i+1)
		default:
			return nil, fmt.Errorf("offset %d: want ',' or '}'", i)
		}
	}
}

func checkEnd(data []byte, i int) error {
	if skipSpace(data, i) != len(data) {
		return fmt.Errorf("offset %d: data after the object", i)
	}
	return nil
}

func decodeKey(quoted []byte) (string, error) {
	// encoding/json replaces invalid UTF-8 with U+FFFD: only a plain valid name is taken as it is.
	if bytes.IndexByte(quoted, '\\') < 0 && utf8.Valid(quoted) {
		return string(quoted[1 : len(quoted)-1]), nil
	}
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return "", err
	}
	return s, nil
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the offset after the string starting at data[i] (a '"'). A quote is the end
// unless an odd number of backslashes precedes it.
func skipString(data []byte, i int) (int, error) {
	for j := i + 1; j < len(data); {
		k := bytes.IndexByte(data[j:], '"')
		if k < 0 {
			break
		}
		q := j + k
		bs := 0
		for p := q - 1; p > i && data[p] == '\\'; p-- {
			bs++
		}
		if bs%2 == 0 {
			return q + 1, nil
		}
		j = q + 1
	}
	return 0, errors.New("unterminated string")
}

// maxNesting bounds the depth skipValue walks, as encoding/json's scanner does (10000).
const maxNesting = 10000

// skipValue returns the offset after the value starting at data[i].
func skipValue(data []byte, i int) (int, error) {
	if i >= len(data) {
		return 0, errors.New("unexpected end of JSON")
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
	default:
		// A number or literal: up to the next delimiter; the encoder validates it.
		j := i
		for j < len(data) {
			switch data[j] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				if j == i {
					return 0, fmt.Errorf("offset %d: want a value", i)
				}
				return j, nil
			}
			j++
		}
		return j, nil
	}
	var stack []byte
	for j := i; j < len(data); j++ {
		switch c := data[j]; c {
		case '"':
			end, err := skipString(data, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case '{', '[':
			if len(stack) == maxNesting {
				return 0, errors.New("JSON nested too deeply")
			}
			stack = append(stack, c)
		case '}', ']':
			open := byte('{')
			if c == ']' {
				open = '['
			}
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return 0, fmt.Errorf("offset %d: unbalanced %c", j, c)
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, errors.New("unexpected end of JSON")
}
