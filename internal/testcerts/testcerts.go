package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Set is the files of one test CA.
type Set struct {
	CA                    string // the CA's certificate, which signs both others
	ServerCert, ServerKey string // for 127.0.0.1, ::1 and localhost
	ClientCert, ClientKey string // CN "lockproxy-test-client", client auth
	Dir                   string

	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

// New creates a CA and its server and client certificates in a fresh
// t.TempDir(). It calls t.Fatal on any failure.
func New(t testing.TB) *Set {
	t.Helper()
	s := &Set{Dir: t.TempDir()}
	var err error
	if s.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "lockproxy test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, ca, ca, &s.caKey.PublicKey, s.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if s.caCert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	s.CA = s.write(t, "ca.pem", "CERTIFICATE", der)
	s.ServerCert, s.ServerKey = s.Issue(t, "server", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	s.ClientCert, s.ClientKey = s.Issue(t, "client", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "lockproxy-test-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return s
}

// Issue signs a certificate shaped by tmpl (subject, names, usages) with
// the CA and returns the paths of its certificate and key, name.pem and
// name-key.pem.
func (s *Set) Issue(t testing.TB, name string, tmpl *x509.Certificate) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	c := *tmpl
	c.SerialNumber = serial
	c.NotBefore, c.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	c.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, &c, s.caCert, &k.PublicKey, s.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return s.write(t, name+".pem", "CERTIFICATE", der), s.write(t, name+"-key.pem", "PRIVATE KEY", keyDER)
}

func (s *Set) write(t testing.TB, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(s.Dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Pool returns a pool holding the CA.
func (s *Set) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.caCert)
	return p
}

// ClientTLS returns a client configuration that trusts the CA and, with
// withCert, presents the client certificate.
func (s *Set) ClientTLS(t testing.TB, withCert bool) *tls.Config {
	t.Helper()
	c := &tls.Config{RootCAs: s.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(s.ClientCert, s.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}
