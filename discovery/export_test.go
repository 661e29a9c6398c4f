package discovery

// CheckAddress exposes the address policy to the external tests.
func CheckAddress(p AddressPolicy, annotation string) error {
	_, _, err := p.check(annotation, nil)
	return err
}
