package dataplane

import (
	"crypto/sha256"
	"encoding/asn1"
	"encoding/hex"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// rfc2253 is Envoy's subjectPeerCertificate(): Utility::getSubjectFromCertificate
// (source/common/tls/utility.cc) prints the subject with BoringSSL's
// X509_NAME_print_ex(XN_FLAG_RFC2253) and ignores its result. From BoringSSL's do_name_ex and
// crypto/asn1/a_strex.cc: the entries last first (XN_FLAG_DN_REV, also inside a multi-valued RDN),
// '+' between entries of one RDN and ',' between RDNs; a known attribute by its short name, an
// unknown one by its dotted OID with its value dumped as '#' and the uppercase hex of its DER
// (XN_FLAG_DUMP_UNKNOWN_FIELDS); a string decoded by its type (UTF8String as UTF-8, BMPString as
// UCS-2, UniversalString as UTF-32, Numeric/Printable/T61/IA5/Visible strings and times as
// Latin-1), any other type dumped; each decoded character re-encoded as UTF-8 and each byte escaped
// by do_esc_char with ESC_2253, ESC_CTRL and ESC_MSB. A value that does not decode stops the print:
// the text so far is what Envoy returns.
func rfc2253(rawSubject []byte) string {
	type entry struct {
		set int
		oid asn1.ObjectIdentifier
		val asn1.RawValue
	}
	var entries []entry
	var rdns []asn1.RawValue
	if rest, err := asn1.Unmarshal(rawSubject, &rdns); err != nil || len(rest) > 0 {
		return ""
	}
	for set, rdn := range rdns {
		for in := rdn.Bytes; len(in) > 0; {
			var atv struct {
				OID asn1.ObjectIdentifier
				Val asn1.RawValue
			}
			var err error
			if in, err = asn1.Unmarshal(in, &atv); err != nil {
				return ""
			}
			entries = append(entries, entry{set: set, oid: atv.OID, val: atv.Val})
		}
	}
	var b strings.Builder
	prev := -1
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if prev != -1 {
			if prev == e.set {
				b.WriteByte('+')
			} else {
				b.WriteByte(',')
			}
		}
		prev = e.set
		sn, known := boringShortNames[e.oid.String()]
		if !known {
			b.WriteString(e.oid.String())
			b.WriteByte('=')
			dumpHex(&b, e.val.FullBytes)
			continue
		}
		b.WriteString(sn)
		b.WriteByte('=')
		runes, ok, isString := decodeASN1String(e.val)
		if !isString {
			dumpHex(&b, e.val.FullBytes) // ASN1_STRFLGS_DUMP_UNKNOWN with DUMP_DER
			continue
		}
		var u []byte
		for _, r := range runes {
			u = utf8.AppendRune(u, r)
		}
		for j, c := range u {
			escapeByte(&b, c, j == 0, j == len(u)-1)
		}
		if !ok {
			return b.String() // do_buf failed: X509_NAME_print_ex returned -1 mid-way
		}
	}
	return b.String()
}

func dumpHex(b *strings.Builder, der []byte) {
	const hexdig = "0123456789ABCDEF"
	b.WriteByte('#')
	for _, c := range der {
		b.WriteByte(hexdig[c>>4])
		b.WriteByte(hexdig[c&0xf])
	}
}

// escapeByte is do_esc_char for one UTF-8 byte under ASN1_STRFLGS_RFC2253 (no ESC_QUOTE).
func escapeByte(b *strings.Builder, c byte, first, last bool) {
	const hexdig = "0123456789ABCDEF"
	switch {
	case c > 0x7f || c < 32 || c == 127:
		b.WriteByte('\\')
		b.WriteByte(hexdig[c>>4])
		b.WriteByte(hexdig[c&0xf])
	case c == '\\' || c == '"' || c == ',' || c == '+' || c == '<' || c == '>' || c == ';',
		first && (c == ' ' || c == '#'), last && c == ' ':
		b.WriteByte('\\')
		b.WriteByte(c)
	default:
		b.WriteByte(c)
	}
}

// decodeASN1String decodes a value the way do_buf's get_char functions do (CBS_get_utf8,
// CBS_get_ucs2_be, CBS_get_utf32_be reject surrogates, values above U+10FFFF and
// noncharacters; Latin-1 takes every byte). It returns the characters decoded before a failure,
// whether all decoded, and whether the type is a string type at all (string_type_to_encoding).
func decodeASN1String(v asn1.RawValue) (runes []rune, ok, isString bool) {
	body := v.Bytes
	if v.Class != asn1.ClassUniversal || v.IsCompound {
		return nil, false, false
	}
	valid := func(r rune) bool {
		return r <= 0x10ffff && (r < 0xd800 || r > 0xdfff) && (r < 0xfdd0 || r > 0xfdef) && r&0xfffe != 0xfffe
	}
	switch v.Tag {
	case asn1.TagUTF8String:
		for len(body) > 0 {
			r, n := utf8.DecodeRune(body)
			if r == utf8.RuneError && n <= 1 || !valid(r) {
				return runes, false, true
			}
			runes, body = append(runes, r), body[n:]
		}
		return runes, true, true
	case asn1.TagBMPString:
		for ; len(body) >= 2; body = body[2:] {
			r := rune(body[0])<<8 | rune(body[1])
			if utf16.IsSurrogate(r) || !valid(r) {
				return runes, false, true
			}
			runes = append(runes, r)
		}
		return runes, len(body) == 0, true
	case 28: // UniversalString
		for ; len(body) >= 4; body = body[4:] {
			r := rune(body[0])<<24 | rune(body[1])<<16 | rune(body[2])<<8 | rune(body[3])
			if !valid(r) {
				return runes, false, true
			}
			runes = append(runes, r)
		}
		return runes, len(body) == 0, true
	case asn1.TagNumericString, asn1.TagPrintableString, asn1.TagT61String, asn1.TagIA5String,
		asn1.TagUTCTime, asn1.TagGeneralizedTime, 26: // 26: VisibleString
		for _, c := range body {
			runes = append(runes, rune(c))
		}
		return runes, true, true
	}
	return nil, false, false
}

// boringShortNames are BoringSSL's short names (OBJ_nid2sn) of the subject attributes a client
// certificate commonly carries. An attribute outside this table prints as its dotted OID with its
// value dumped, which BoringSSL does only for OIDs it does not know: a name here that BoringSSL
// knows by another spelling would print differently, never as CN or O (the two identity uses).
var boringShortNames = map[string]string{
	"2.5.4.3": "CN", "2.5.4.4": "SN", "2.5.4.5": "serialNumber", "2.5.4.6": "C", "2.5.4.7": "L",
	"2.5.4.8": "ST", "2.5.4.9": "street", "2.5.4.10": "O", "2.5.4.11": "OU", "2.5.4.12": "title",
	"2.5.4.42": "GN", "2.5.4.43": "initials", "2.5.4.46": "dnQualifier", "2.5.4.65": "pseudonym",
	"1.2.840.113549.1.9.1": "emailAddress", "0.9.2342.19200300.100.1.1": "UID",
	"0.9.2342.19200300.100.1.25": "DC",
}

func hexSum(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
