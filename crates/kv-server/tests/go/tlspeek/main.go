// tlspeek dials a TLS listener as etcd's own peers dial an auto-TLS
// member (InsecureSkipVerify: the certificate is self-signed) and prints,
// as one JSON object, what the certificate it presented says.
//
// Usage: tlspeek HOST:PORT
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tlspeek HOST:PORT")
		os.Exit(2)
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(dialer, "tcp", os.Args[1], &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	cert := conn.ConnectionState().PeerCertificates[0]
	ips := []string{}
	for _, ip := range cert.IPAddresses {
		ips = append(ips, ip.String())
	}
	serverAuth := false
	for _, usage := range cert.ExtKeyUsage {
		if usage == x509.ExtKeyUsageServerAuth {
			serverAuth = true
		}
	}
	out := map[string]any{
		"subject":     cert.Subject.String(),
		"issuer":      cert.Issuer.String(),
		"dns":         cert.DNSNames,
		"ips":         ips,
		"is_ca":       cert.IsCA,
		"server_auth": serverAuth,
		"self_signed": cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature) == nil,
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
