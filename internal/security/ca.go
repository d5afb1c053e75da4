package security

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Validity of what NewCA and Issue create unless told otherwise.
const (
	CAValidityDefault   = 10 * 365 * 24 * time.Hour
	CertValidityDefault = 365 * 24 * time.Hour
	// clockSkewAllowance backdates certificates, so a peer whose clock is
	// a little behind accepts a certificate issued just now.
	clockSkewAllowance = time.Hour
)

// File names in a certificate directory (catena certs, catena dev).
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// CA is a certificate authority that issues Catena certificates (ECDSA
// P-256).
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA creates a self-signed CA named name, valid for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Catena"}},
		NotBefore:             now.Add(-clockSkewAllowance),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return n
}

// Issued is a certificate and its key, as DER.
type Issued struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// IssueOptions tune Issue.
type IssueOptions struct {
	// NotBefore and NotAfter bound the validity (default: from an hour ago
	// to CertValidityDefault from now).
	NotBefore, NotAfter time.Time
	// Hosts are extra DNS names or IP addresses for the certificate (the
	// host of a member's name is added), so HTTPS clients can check it.
	Hosts []string
}

// Issue creates a certificate for id signed by the CA. Members'
// certificates serve and dial (server and client authentication);
// clients' and proxies' only dial.
func (ca *CA) Issue(id Identity, o IssueOptions) (*Issued, error) {
	if id.Name == "" || strings.ContainsAny(id.Name, "/ ") {
		return nil, fmt.Errorf("name %q: want a non-empty name without '/' or spaces", id.Name)
	}
	if _, err := ParseRole(string(id.Role)); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if o.NotBefore.IsZero() {
		o.NotBefore = now.Add(-clockSkewAllowance)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = now.Add(CertValidityDefault)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.Name, OrganizationalUnit: []string{string(id.Role)}, Organization: []string{"Catena"}},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id.URI()},
	}
	hosts := o.Hosts
	// The proxy serves the Redis protocol and members serve HTTP and
	// cluster links: their certificates are server certificates too.
	if id.Role.Member() || id.Role == RoleProxy {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		if host, _, err := net.SplitHostPort(id.Name); err == nil {
			hosts = append([]string{host}, hosts...)
		}
	}
	// A certificate for a loopback host names the others too, so HTTPS
	// clients may use any of them (https://localhost:7180/).
	if slices.ContainsFunc(hosts, isLoopbackName) {
		hosts = slices.Concat(hosts, loopbackHosts)
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String()
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Issued{Cert: cert, Key: key}, nil
}

// CertPEM encodes a certificate as PEM.
func CertPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// KeyPEM encodes a private key as PEM (PKCS #8).
func KeyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// writeFileAtomic writes data to path through a temporary file and a
// rename, so a process reloading its certificate never reads half a file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Save writes the CA's certificate and key into dir as ca.crt and ca.key
// (the key readable by its owner only).
func (ca *CA) Save(dir string) error {
	key, err := KeyPEM(ca.Key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, CAKeyFile), key, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, CACertFile), CertPEM(ca.Cert), 0o644)
}

// LoadCA reads a CA saved by Save.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%s: malformed CA files", dir)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("the CA key is not an ECDSA key")
	}
	return &CA{Cert: cert, Key: key}, nil
}

// FileBase returns the file name (without extension) catena certs gives
// an identity's certificate: role-name, with ':' replaced by '_'.
func FileBase(id Identity) string {
	return string(id.Role) + "-" + strings.NewReplacer(":", "_", "[", "", "]", "").Replace(id.Name)
}

// Save writes the certificate and key into dir as <base>.crt and
// <base>.key (FileBase) and returns the files, with dir's ca.crt as CA.
func (is *Issued) Save(dir string, id Identity) (Files, error) {
	base := filepath.Join(dir, FileBase(id))
	key, err := KeyPEM(is.Key)
	if err != nil {
		return Files{}, err
	}
	if err := writeFileAtomic(base+".key", key, 0o600); err != nil {
		return Files{}, err
	}
	if err := writeFileAtomic(base+".crt", CertPEM(is.Cert), 0o644); err != nil {
		return Files{}, err
	}
	return Files{CA: filepath.Join(dir, CACertFile), Cert: base + ".crt", Key: base + ".key"}, nil
}

// DirFiles returns the files of id in a directory written by catena certs.
func DirFiles(dir string, id Identity) Files {
	base := filepath.Join(dir, FileBase(id))
	return Files{CA: filepath.Join(dir, CACertFile), Cert: base + ".crt", Key: base + ".key"}
}
