package dataplane

import (
	"crypto/x509"
	"fmt"
	"slices"
)

// verifySSLClientPurpose refuses a client certificate chain that BoringSSL's "ssl_client" purpose
// refuses, where Go's own verification (KeyUsages ClientAuth) accepts it. Envoy's default validator
// sets that purpose on a server's verify context (default_validator.cc,
// X509_STORE_CTX_set_default(ctx, "ssl_client"), main copy 0ce4e8aa), and X509_verify_cert checks
// it on every certificate of the chain. BoringSSL's check_purpose_ssl_client (crypto/x509/v3_purp.cc,
// the newest stored copy): an extended key usage extension without clientAuth is refused in every
// certificate (anyExtendedKeyUsage does not count: it sets XKU_ANYEKU, not XKU_SSL_CLIENT; Go
// accepts it), and a leaf's key usage, if present, must allow digitalSignature or keyAgreement (Go
// does not check key usage). The Netscape cert type extension is not read (Go does not parse it):
// the stand-in is kinder there, and no certificate here carries one.
func verifySSLClientPurpose(_ [][]byte, chains [][]*x509.Certificate) error {
	for _, chain := range chains {
		for i, c := range chain {
			if hasExtension(c, oidExtKeyUsage) && !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
				return fmt.Errorf("certificate %q: extended key usage without clientAuth (BoringSSL ssl_client purpose)", c.Subject.CommonName)
			}
			if i == 0 && hasExtension(c, oidKeyUsage) && c.KeyUsage&(x509.KeyUsageDigitalSignature|x509.KeyUsageKeyAgreement) == 0 {
				return fmt.Errorf("certificate %q: key usage allows neither digitalSignature nor keyAgreement (BoringSSL ssl_client purpose)", c.Subject.CommonName)
			}
		}
	}
	return nil
}

var (
	oidKeyUsage    = []int{2, 5, 29, 15}
	oidExtKeyUsage = []int{2, 5, 29, 37}
)

// hasExtension says the certificate carries the extension (BoringSSL's EXFLAG_KUSAGE and
// EXFLAG_XKUSAGE: present, whatever it holds).
func hasExtension(c *x509.Certificate, oid []int) bool {
	for _, e := range c.Extensions {
		if e.Id.Equal(oid) {
			return true
		}
	}
	return false
}
