package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"testing"
	"time"
	"unicode/utf16"
)

var (
	oidCN  = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidO   = asn1.ObjectIdentifier{2, 5, 4, 10}
	oidOU  = asn1.ObjectIdentifier{2, 5, 4, 11}
	oidC   = asn1.ObjectIdentifier{2, 5, 4, 6}
	oidUID = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57683, 2}
	oidOdd = asn1.ObjectIdentifier{1, 2, 3, 4, 5}
)

// attr is one attribute; rdn groups attributes into one RDN (a multi-valued one if several).
type attr struct {
	oid asn1.ObjectIdentifier
	val any // a string (PrintableString if it can be, else UTF8String) or an asn1.RawValue
}

func utf8s(s string) asn1.RawValue { return asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: []byte(s)} }
func printable(s string) asn1.RawValue {
	return asn1.RawValue{Tag: asn1.TagPrintableString, Bytes: []byte(s)}
}
func t61(b []byte) asn1.RawValue { return asn1.RawValue{Tag: asn1.TagT61String, Bytes: b} }
func bmp(s string, terminator bool) asn1.RawValue {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		b = append(b, byte(u>>8), byte(u))
	}
	if terminator {
		b = append(b, 0, 0)
	}
	return asn1.RawValue{Tag: asn1.TagBMPString, Bytes: b}
}

type rdn []attr

// subject encodes RDNs in the given order.
func subject(t testing.TB, rdns ...rdn) []byte {
	t.Helper()
	var seq pkix.RDNSequence
	for _, r := range rdns {
		var set pkix.RelativeDistinguishedNameSET
		for _, a := range r {
			v := a.val
			if s, ok := v.(string); ok {
				v = utf8s(s)
			}
			set = append(set, pkix.AttributeTypeAndValue{Type: a.oid, Value: v})
		}
		seq = append(seq, set)
	}
	der, err := asn1.Marshal(seq)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t testing.TB) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "identity test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key}
}

// issue signs a client certificate with rawSubject; eku nil means clientAuth.
func (ca *testCA) issue(t testing.TB, rawSubject []byte, eku []x509.ExtKeyUsage) *x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if eku == nil {
		eku = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	sn, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: sn, RawSubject: rawSubject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: eku,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return c
}
