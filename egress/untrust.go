package egress

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"strings"
)

// MaxBundleBytes is the largest trust bundle StripCA is given; a bigger
// one is left as it is (InstallCA never writes into one that big).
const MaxBundleBytes = maxBundle

// StripCA removes every berth egress CA certificate (any deployment's:
// an IsCA certificate of organization "berth" named "berth egress CA
// (…)") from a PEM trust bundle, with the line break InstallCA put
// before it, and reports whether it removed any. What a sandbox's start
// added is taken out of what leaves the sandbox as an image layer, so a
// built image does not trust this deployment's proxy wherever it runs
// (each start installs the CA again). Everything else in the bundle is
// kept byte for byte, including blocks that do not parse (a line break
// InstallCA added before the CA, to a bundle that lacked a final one,
// stays).
func StripCA(bundle []byte) ([]byte, bool) {
	var out bytes.Buffer
	rest := bundle
	removed := false
	for {
		i := bytes.Index(rest, []byte("-----BEGIN CERTIFICATE-----"))
		if i < 0 {
			out.Write(rest)
			break
		}
		block, after := pem.Decode(rest[i:])
		if block == nil {
			out.Write(rest)
			break
		}
		end := len(rest) - len(after)
		if isBerthCA(block) {
			out.Write(rest[:i]) // what comes before it; the block goes with its line end
			removed = true
		} else {
			out.Write(rest[:end])
		}
		rest = after
	}
	if !removed {
		return bundle, false
	}
	return out.Bytes(), true
}

func isBerthCA(b *pem.Block) bool {
	if b.Type != "CERTIFICATE" {
		return false
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil || !c.IsCA {
		return false
	}
	return len(c.Subject.Organization) == 1 && c.Subject.Organization[0] == "berth" &&
		strings.HasPrefix(c.Subject.CommonName, "berth egress CA (")
}
