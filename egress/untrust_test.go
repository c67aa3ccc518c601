package egress

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func selfSigned(t *testing.T, name pkix.Name) []byte {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: name, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// What InstallCA appends, StripCA takes out, and only that: another CA
// (the negative control, even one named like berth's but of another
// organization) and the rest of the bundle stay byte for byte.
func TestStripCAUndoesInstallCA(t *testing.T) {
	berthPEM, _, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	other := selfSigned(t, pkix.Name{CommonName: "Some Root CA", Organization: []string{"Example"}})
	lookalike := selfSigned(t, pkix.Name{CommonName: "berth egress CA (x)", Organization: []string{"not berth"}})
	for _, old := range [][]byte{
		append(append([]byte("# comment\n"), other...), lookalike...),
		bytes.TrimSuffix(other, []byte("\n")), // no final line break: InstallCA adds one
	} {
		root := t.TempDir()
		if err := writeNew(mustOpen(t, root), BundleInSandbox, old); err != nil {
			t.Fatal(err)
		}
		if err := installCA(root, berthPEM); err != nil {
			t.Fatal(err)
		}
		installed := readFile(t, root+BundleInSandbox)
		if !bytes.Contains(installed, berthPEM) {
			t.Fatal("negative control: the CA was not installed")
		}
		got, removed := StripCA(installed)
		want := old
		if !bytes.HasSuffix(old, []byte("\n")) {
			want = append(append([]byte(nil), old...), '\n')
		}
		if !removed || !bytes.Equal(got, want) {
			t.Fatalf("stripped bundle:\n%q\nwant\n%q", got, want)
		}
		if _, again := StripCA(old); again {
			t.Fatal("StripCA removed something from a bundle without berth's CA")
		}
	}
}

func mustOpen(t *testing.T, dir string) *os.File {
	f, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readFile(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
