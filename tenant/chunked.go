package tenant

import (
	"bytes"
	"io"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// chunkTenants is how many tenant entries parseChunked decodes at once.
const chunkTenants = 256

// parseChunked reads a file whose tenants are a block list under a
// top-level "tenants:" line without decoding the whole document, which
// for 100,000 tenants would build a node tree of several hundred
// megabytes. It decodes the rest of the file (the tenant lines blanked,
// so line numbers hold) for the tiers, then the list a few hundred
// entries at a time, each chunk a block sequence of its own. ok is false
// when the file is not laid out that way, or a chunk does not decode
// cleanly; the caller then decodes the file whole, which gives the same
// result or the authoritative error. Only a layout where every chunk
// means on its own what it means in the file is accepted: no anchors or
// aliases in the list, no directives or document markers, indentation
// of spaces only.
func parseChunked(data []byte) (cfg *Config, err error, ok bool) {
	sp, ok := splitTenants(data)
	if !ok {
		return nil, nil, false
	}
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(sp.skeleton))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil || len(f.Tenants) != 0 {
		return nil, nil, false
	}
	b := newBuilder(f.Tiers, len(sp.items))
	var entries []tenantEntry
	for start := 0; start < len(sp.items); start += chunkTenants {
		end := min(start+chunkTenants, len(sp.items))
		first := sp.items[start]
		if start == 0 {
			first = sp.head // with the comments before the first entry
		}
		last := sp.end
		if end < len(sp.items) {
			last = sp.items[end].off
		}
		chunk := data[first.off:last]
		entries, ok = fastEntries(chunk, first.line, sp.indent, entries[:0])
		if !ok || len(entries) != end-start {
			if entries, ok = yamlEntries(chunk, first.line, entries[:0]); !ok || len(entries) != end-start {
				return nil, nil, false
			}
		}
		for i := range entries {
			b.add(&entries[i])
		}
	}
	cfg, err = b.done()
	return cfg, err, true
}

// yamlEntries decodes chunk, whose first line is line base, with yaml.
func yamlEntries(chunk []byte, base int, out []tenantEntry) ([]tenantEntry, bool) {
	dec := yaml.NewDecoder(bytes.NewReader(chunk))
	dec.KnownFields(true)
	if err := dec.Decode(&out); err != nil {
		return out, false
	}
	var extra any
	if dec.Decode(&extra) != io.EOF {
		return out, false
	}
	for i := range out {
		out[i].line += base - 1
	}
	return out, true
}

// split is a file cut for parseChunked: the skeleton (the file with the
// list's lines blanked, so "tenants:" reads as empty), where the list's
// lines start (head) and end, and where each tenant entry starts.
type split struct {
	skeleton []byte
	head     item
	items    []item
	end      int
	indent   int // the entries' indentation
}

type item struct {
	off  int // byte offset of the entry's "-" line
	line int // its 1-based line number
}

// splitTenants cuts data for parseChunked, or reports that its layout is
// not one the chunks can read.
func splitTenants(data []byte) (split, bool) {
	var (
		sp        split
		listLine  = -1 // the "tenants:" line's index
		indent    = -1 // the entries' indentation
		inList    bool
		listLines int // lines in the list, blanked in the skeleton
		lineNo    int
		off       int
	)
	for off < len(data) {
		lineNo++
		nl := bytes.IndexByte(data[off:], '\n')
		end := len(data)
		if nl >= 0 {
			end = off + nl + 1
		}
		line := data[off:end]
		body := bytes.TrimRight(line, "\r\n")
		n := 0
		for n < len(body) && body[n] == ' ' {
			n++
		}
		rest := body[n:]
		switch {
		case len(rest) > 0 && rest[0] == '\t':
			return split{}, false // tabs in indentation
		case n == 0 && (bytes.HasPrefix(rest, []byte("---")) || bytes.HasPrefix(rest, []byte("...")) || bytes.HasPrefix(rest, []byte("%"))):
			return split{}, false // directives or several documents
		}
		blank := len(rest) == 0 || rest[0] == '#'
		if inList && !blank {
			dash := len(rest) > 0 && rest[0] == '-' && (len(rest) == 1 || rest[1] == ' ')
			if indent < 0 {
				if !dash {
					return split{}, false // not a block list
				}
				indent = n
			}
			switch {
			case n == 0 && !dash:
				inList = false // the next top-level key
				sp.end = off
			case n < indent || (n == indent && !dash):
				return split{}, false // neither an entry nor a top-level key
			case bytes.ContainsAny(rest, "&*"):
				return split{}, false // anchors or aliases (or keys that look like them)
			case n == indent:
				sp.items = append(sp.items, item{off: off, line: lineNo})
			}
		}
		if inList {
			listLines++
		} else if n == 0 && isTenantsLine(rest) {
			if listLine >= 0 {
				return split{}, false // the key twice
			}
			listLine, inList = lineNo, true
			sp.head = item{off: end, line: lineNo + 1}
		}
		off = end
	}
	if listLine < 0 || len(sp.items) == 0 {
		return split{}, false
	}
	if inList {
		sp.end = len(data)
	}
	sp.indent = indent
	skeleton := make([]byte, 0, sp.head.off+len(data)-sp.end+listLines)
	skeleton = append(skeleton, data[:sp.head.off]...)
	skeleton = append(skeleton, bytes.Repeat([]byte{'\n'}, listLines)...)
	skeleton = append(skeleton, data[sp.end:]...)
	sp.skeleton = skeleton
	return sp, true
}

// isTenantsLine reports whether a top-level line opens the tenants list:
// "tenants:" with nothing after it but a comment.
func isTenantsLine(rest []byte) bool {
	after, ok := bytes.CutPrefix(rest, []byte("tenants:"))
	if !ok {
		return false
	}
	if len(after) == 0 {
		return true
	}
	if after[0] != ' ' {
		return false // "tenants:#x" is one plain scalar
	}
	after = bytes.TrimLeft(after, " ")
	return len(after) == 0 || after[0] == '#'
}

// Hand decoding of the plainest entries. A chunk whose every line is one
// of these is decoded without yaml (about twenty times faster and with a
// tenth of the garbage); any other line hands the chunk to yaml:
//
//	- key: value        at the entries' indentation
//	  key: value        two spaces deeper
//	(blank lines)
//
// where key is a tenant field other than a list, or api_keys or
// api_key_sha256 with a flow list ([a, b]); a string value starts with a
// letter or digit and has only letters, digits, '.', '_' and '-' (and is
// not YAML's null); a number is a plain decimal. yaml reads exactly these
// the same way: as the literal text for a string field (yaml.v3 gives a
// string field a scalar's text whatever its resolved type), as the
// number for a numeric one.

// fastEntries decodes chunk, whose first line is line base, into out, or
// reports that a line is not of the plain form.
func fastEntries(chunk []byte, base, indent int, out []tenantEntry) ([]tenantEntry, bool) {
	var (
		cur  *tenantEntry
		seen []string // the current entry's keys
	)
	lineNo := base - 1
	for len(chunk) > 0 {
		lineNo++
		line := chunk
		if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
			line, chunk = chunk[:i], chunk[i+1:]
		} else {
			chunk = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		n := 0
		for n < len(line) && line[n] == ' ' {
			n++
		}
		rest := line[n:]
		switch {
		case len(rest) == 0:
			continue
		case n == indent && bytes.HasPrefix(rest, []byte("- ")):
			out = append(out, tenantEntry{line: lineNo})
			cur, seen = &out[len(out)-1], seen[:0]
			rest = rest[2:]
		case n == indent+2 && cur != nil:
		default:
			return out, false
		}
		k, value, ok := bytes.Cut(rest, []byte(": "))
		key := string(k)
		if !ok || slices.Contains(seen, key) || !setField(cur, key, value) {
			return out, false
		}
		seen = append(seen, key)
	}
	return out, true
}

// setField sets one field of e from a plain value, or reports that the
// value is not of the plain form.
func setField(e *tenantEntry, key string, v []byte) bool {
	switch key {
	case "id":
		return plainString(v, &e.ID)
	case "tier":
		return plainString(v, &e.Tier)
	case "lane":
		return plainString(v, &e.Lane)
	case "api_keys":
		return flowList(v, &e.APIKeys)
	case "api_key_sha256":
		return flowList(v, &e.APIKeySHA256)
	case "submit_rate":
		return plainFloat(v, &e.SubmitRate)
	case "hwm_fraction":
		return plainFloat(v, &e.HWMFraction)
	case "drain_rate":
		return plainFloat(v, &e.DrainRate)
	case "submit_burst":
		return plainInt(v, &e.SubmitBurst)
	case "drain_burst":
		return plainInt(v, &e.DrainBurst)
	case "max_in_flight":
		return plainInt(v, &e.MaxInFlight)
	case "max_payload_bytes":
		return plainInt(v, &e.MaxPayloadBytes)
	}
	return false
}

func plainString(v []byte, dst *string) bool {
	if len(v) == 0 || !isAlnum(v[0]) {
		return false
	}
	for _, c := range v {
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	switch string(v) {
	case "null", "Null", "NULL":
		return false
	}
	*dst = string(v)
	return true
}

func flowList(v []byte, dst *[]string) bool {
	inner, open := bytes.CutPrefix(v, []byte("["))
	inner, closed := bytes.CutSuffix(inner, []byte("]"))
	if !open || !closed || len(inner) == 0 {
		return false
	}
	for item := range bytes.SplitSeq(inner, []byte(", ")) {
		var s string
		if !plainString(item, &s) {
			return false
		}
		*dst = append(*dst, s)
	}
	return true
}

// plainDecimal reports whether v is 0 or a decimal without leading zeros,
// with a fraction if fraction is allowed.
func plainDecimal(v []byte, fraction bool) bool {
	whole, frac, dot := bytes.Cut(v, []byte("."))
	if len(whole) == 0 || len(whole) > 15 || (len(whole) > 1 && whole[0] == '0') || !allDigits(whole) {
		return false
	}
	return !dot || (fraction && len(frac) > 0 && len(frac) <= 15 && allDigits(frac))
}

func plainFloat(v []byte, dst *float64) bool {
	if !plainDecimal(v, true) {
		return false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	*dst = f
	return err == nil
}

func plainInt(v []byte, dst *int) bool {
	if !plainDecimal(v, false) {
		return false
	}
	i, err := strconv.Atoi(string(v))
	*dst = i
	return err == nil
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
