package identity

import (
	"crypto/x509"
	"strings"
	"testing"
)

// want is the expected agreement: "same" (front identity equal to the direct one, which has the
// name given, "" for none) or a refusal by the front with the direct outcome named.
type want struct {
	front  string // "same", "401", "503/<reason>", "handshake"
	user   string // the direct user name for "same" ("" = no certificate identity)
	direct string // for refusals: the direct result ("401: <error>", "handshake: <error>", or an identity prefix)
}

// TestDifferentialIdentity runs the table with --forward-certificate-uid, as for apiservers that read
// X-Remote-Uid (the testbed's do).
func TestDifferentialIdentity(t *testing.T) {
	h := newHarness(t, true)
	long := strings.Repeat("x", 4000)
	var manyO []attr
	for i := 0; i < 60; i++ {
		manyO = append(manyO, attr{oidO, "group-" + strings.Repeat("g", i)})
	}
	cases := []struct {
		name  string
		rdns  []rdn
		eku   []x509.ExtKeyUsage
		authz bool
		want  want
	}{
		{"plain", []rdn{{{oidO, "dev"}}, {{oidCN, "alice"}}}, nil, false, want{front: "same", user: "alice"}},
		{"printable strings", []rdn{{{oidO, printable("dev")}}, {{oidCN, printable("alice")}}}, nil, false, want{front: "same", user: "alice"}},
		{"several O in order, system:masters not last", []rdn{{{oidO, "b"}}, {{oidO, "system:masters"}}, {{oidO, "a"}}, {{oidCN, "root"}}}, nil, false, want{front: "same", user: "root"}},
		{"several CN: Go's last wins", []rdn{{{oidCN, "first"}}, {{oidCN, "second"}}}, nil, false, want{front: "same", user: "second"}},
		{"several CN, last empty: no identity, no token", []rdn{{{oidCN, "alice"}}, {{oidCN, ""}}}, nil, false, want{front: "503/nouser", direct: "no identity"}},
		{"empty first CN", []rdn{{{oidCN, ""}}, {{oidCN, "bob"}}}, nil, false, want{front: "same", user: "bob"}},
		{"no CN, no token: directly anonymous", []rdn{{{oidO, "dev"}}}, nil, false, want{front: "503/nouser", direct: "no identity"}},
		{"no CN with a bearer token: the token decides", []rdn{{{oidO, "dev"}}}, nil, true, want{front: "same", user: ""}},
		{"empty subject", nil, nil, false, want{front: "503/nouser", direct: "no identity"}},
		{"empty O", []rdn{{{oidO, ""}}, {{oidCN, "alice"}}}, nil, false, want{front: "503/subject", direct: `{"extra":{"authentication.kubernetes.io/credential-id"`}},
		{"commas", []rdn{{{oidO, "x, y"}}, {{oidCN, "a,b"}}}, nil, false, want{front: "same", user: "a,b"}},
		{"plus signs", []rdn{{{oidO, "+g+"}}, {{oidCN, "a+b"}}}, nil, false, want{front: "same", user: "a+b"}},
		{"escapes and quotes", []rdn{{{oidO, `<o>;"q"`}}, {{oidCN, `a\b"c<d>e;f=g`}}}, nil, false, want{front: "same", user: `a\b"c<d>e;f=g`}},
		{"leading #", []rdn{{{oidCN, "#hash"}}}, nil, false, want{front: "same", user: "#hash"}},
		{"escaped hex look-alike", []rdn{{{oidCN, `\41\`}}}, nil, false, want{front: "same", user: `\41\`}},
		{"inner spaces", []rdn{{{oidCN, "a  b"}}}, nil, false, want{front: "same", user: "a  b"}},
		{"trailing space: HTTP trims it", []rdn{{{oidCN, "alice "}}}, nil, false, want{front: "503/subject", direct: `{"extra"`}},
		{"only a space", []rdn{{{oidCN, " "}}}, nil, false, want{front: "503/subject", direct: `{"extra"`}},
		{"tab", []rdn{{{oidCN, "a\tb"}}}, nil, false, want{front: "503/subject", direct: `{"extra"`}},
		{"newline in O", []rdn{{{oidO, "a\nb"}}, {{oidCN, "alice"}}}, nil, false, want{front: "503/subject", direct: `{"extra"`}},
		{"non-ASCII UTF8String", []rdn{{{oidO, "ÉQUIPE"}}, {{oidCN, "jürgen 日本"}}}, nil, false, want{front: "same", user: "jürgen 日本"}},
		{"BMPString", []rdn{{{oidO, bmp("Ωmega", false)}}, {{oidCN, bmp("Zoë", false)}}}, nil, false, want{front: "same", user: "Zoë"}},
		{"BMPString with a terminator", []rdn{{{oidCN, bmp("zoe", true)}}}, nil, false, want{front: "503/subject", direct: `{"extra"`}},
		{"T61String Latin-1", []rdn{{{oidCN, t61([]byte("caf\xe9"))}}}, nil, false, want{front: "same", user: "café"}},
		{"multi-valued RDN", []rdn{{{oidCN, "alice"}, {oidO, "dev"}}, {{oidO, "ops"}, {oidOU, "unit"}}}, nil, false, want{front: "same", user: "alice"}},
		{"other attributes and an unknown OID", []rdn{{{oidC, printable("DE")}}, {{oidOdd, "x,y+z"}}, {{oidOU, "u"}}, {{oidCN, "carol"}}}, nil, false, want{front: "same", user: "carol"}},
		{"very long subject", append([]rdn{{{oidCN, long}}}, rdn(manyO)), nil, false, want{front: "same", user: long}},
		{"UID", []rdn{{{oidCN, "alice"}}, {{oidUID, "1234-abcd"}}}, nil, false, want{front: "same", user: "alice"}},
		{"UID PrintableString", []rdn{{{oidUID, printable("uid-1")}}, {{oidCN, "alice"}}}, nil, false, want{front: "same", user: "alice"}},
		{"UID in a multi-valued RDN", []rdn{{{oidCN, "alice"}, {oidUID, "u+1"}}}, nil, false, want{front: "same", user: "alice"}},
		{"two UIDs", []rdn{{{oidCN, "alice"}}, {{oidUID, "u1"}}, {{oidUID, "u2"}}}, nil, false, want{front: "401", direct: "401: expected 1 UID, but found multiple: [u1 u2]"}},
		{"two UIDs with a bearer token: the token decides", []rdn{{{oidCN, "alice"}}, {{oidUID, "u1"}}, {{oidUID, "u2"}}}, nil, true, want{front: "same-none", direct: "401: expected 1 UID, but found multiple: [u1 u2]"}},
		{"empty UID", []rdn{{{oidCN, "alice"}}, {{oidUID, ""}}}, nil, false, want{front: "401", direct: "401: UID cannot be an empty string"}},
		{"two UIDs, no CN: no identity", []rdn{{{oidUID, "u1"}}, {{oidUID, "u2"}}}, nil, false, want{front: "503/nouser", direct: "no identity"}},
		{"UID BMPString", []rdn{{{oidCN, "alice"}}, {{oidUID, bmp("u1", false)}}}, nil, false, want{front: "503/uid", direct: `{"extra"`}},
		{"UID non-ASCII", []rdn{{{oidCN, "alice"}}, {{oidUID, "üid"}}}, nil, false, want{front: "503/uid", direct: `{"extra"`}},
		{"no clientAuth EKU", []rdn{{{oidCN, "alice"}}}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, false, want{front: "handshake", direct: "handshake: verifying certificate"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cert := h.ca.issue(t, subject(t, c.rdns...), c.eku)
			d, f := h.direct(cert), h.front(t, cert, c.authz)
			t.Logf("direct %.300v; front %.300v; logs %q", d, f, h.logs)
			switch c.want.front {
			case "same":
				if f.refusal != "" || d.refusal != "" || !sameInfo(d.info, f.info) {
					t.Fatalf("front %v, direct %v: want the same identity", f, d)
				}
				if got := ""; d.info != nil {
					got = d.info.GetName()
					if got != c.want.user {
						t.Fatalf("direct user %q, want %q", got, c.want.user)
					}
				} else if c.want.user != "" {
					t.Fatalf("no direct identity, want %q", c.want.user)
				}
			case "same-none":
				if f.refusal != "" || f.info != nil || d.String() != c.want.direct {
					t.Fatalf("front %v (want no identity, the token decides), direct %v (want %s)", f, d, c.want.direct)
				}
			default:
				if f.refusal != c.want.front || !strings.HasPrefix(d.String(), c.want.direct) {
					t.Fatalf("front %v (want %s), direct %v (want %s...)", f, c.want.front, d, c.want.direct)
				}
			}
		})
	}
}

// TestCertificateUIDRefusedUnlessForwarded: without --forward-certificate-uid a certificate with a UID
// is refused (an apiserver without --requestheader-uid-headers would drop the UID silently), while
// the UID's own 401s and certificates without a UID are unchanged.
func TestCertificateUIDRefusedUnlessForwarded(t *testing.T) {
	h := newHarness(t, false)
	for _, c := range []struct {
		name  string
		rdns  []rdn
		front string
	}{
		{"UID", []rdn{{{oidCN, "alice"}}, {{oidUID, "1234-abcd"}}}, "503/uid"},
		{"UID in a multi-valued RDN", []rdn{{{oidCN, "alice"}, {oidUID, "u+1"}}}, "503/uid"},
		{"two UIDs: the apiserver's 401", []rdn{{{oidCN, "alice"}}, {{oidUID, "u1"}}, {{oidUID, "u2"}}}, "401"},
		{"empty UID: the apiserver's 401", []rdn{{{oidCN, "alice"}}, {{oidUID, ""}}}, "401"},
		{"no UID", []rdn{{{oidO, "dev"}}, {{oidCN, "alice"}}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cert := h.ca.issue(t, subject(t, c.rdns...), nil)
			d, f := h.direct(cert), h.front(t, cert, false)
			if f.refusal != c.front {
				t.Fatalf("front %v, want refusal %q (direct %v)", f, c.front, d)
			}
			if c.front == "" && !sameInfo(d.info, f.info) {
				t.Fatalf("front %v, direct %v: want the same identity", f, d)
			}
		})
	}
}
