// Command ociimage writes the driver's multi-platform OCI image index from binaries `go build`
// already made, with go-containerregistry as a library: one image per platform whose only layer
// is the static binary (no base image: nothing is pulled), an SPDX SBOM per image from the
// binary's embedded build info, all timestamps from SOURCE_DATE_EPOCH, so the same binaries give
// the same index digest. It writes an OCI image layout directory and, with -push, the index to
// a registry.
//
//	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) ociimage -out _output/release/oci \
//	  -binary linux/amd64=_output/bin/linux-amd64/shared-resource-csi \
//	  -binary linux/arm64=_output/bin/linux-arm64/shared-resource-csi \
//	  -sbom-dir _output/release -version v0.1.0 -revision $(git rev-parse HEAD) \
//	  [-push ghcr.io/owner/shared-resource-csi:v0.1.0 [-insecure] [-ca-file ca.pem]]
package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// listFlag collects a repeatable flag in order (the index lists platforms in that order).
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var (
		binaries                 listFlag
		out, sbomDir, digestFile string
		o                        options
		push, caFile             string
		insecure                 bool
	)
	flag.Var(&binaries, "binary", "PLATFORM=PATH, e.g. linux/arm64=_output/bin/linux-arm64/shared-resource-csi (repeatable, one per platform)")
	flag.StringVar(&out, "out", "", "OCI image layout directory to write (must not exist, or be empty)")
	flag.StringVar(&sbomDir, "sbom-dir", "", "directory for the SPDX SBOMs, one per platform (<name>-<os>-<arch>.spdx.json); empty: none")
	flag.StringVar(&digestFile, "digest-file", "", "file to write the index digest (sha256:...) to")
	flag.StringVar(&o.name, "name", "shared-resource-csi", "the binary's name in the image (/NAME, the entrypoint)")
	flag.StringVar(&o.version, "version", "", "the version (annotation org.opencontainers.image.version, the layout's ref name)")
	flag.StringVar(&o.revision, "revision", "", "the commit (annotation org.opencontainers.image.revision)")
	flag.StringVar(&o.source, "source", "", "the source repository URL (annotation org.opencontainers.image.source)")
	flag.StringVar(&push, "push", "", "also push the index to this reference (registry/repo:tag)")
	flag.BoolVar(&insecure, "insecure", false, "with -push: the registry speaks plain HTTP (a test registry)")
	flag.StringVar(&caFile, "ca-file", "", "with -push: PEM CA bundle the registry's certificate chains to (added to the system's)")
	flag.Parse()

	if err := func() error {
		if out == "" || len(binaries) == 0 || flag.NArg() > 0 {
			return errors.New("usage: ociimage -out DIR -binary OS/ARCH=PATH... (see -h)")
		}
		epoch, err := sourceDateEpoch()
		if err != nil {
			return err
		}
		o.created = epoch
		var plats []platformBinary
		for _, b := range binaries {
			pb, err := parseBinaryFlag(b)
			if err != nil {
				return err
			}
			plats = append(plats, pb)
		}
		res, err := buildIndex(plats, o)
		if err != nil {
			return err
		}
		if err := writeLayout(out, res.index, o.version); err != nil {
			return err
		}
		if sbomDir != "" {
			if err := writeSBOMs(sbomDir, o.name, res); err != nil {
				return err
			}
		}
		digest, err := res.index.Digest()
		if err != nil {
			return err
		}
		for _, p := range res.images {
			fmt.Printf("%s\tmanifest %s\tlayer %d bytes (gzip), binary %d bytes\n", p.platform, p.digest, p.layerSize, p.binarySize)
		}
		fmt.Printf("index\t%s\n", digest)
		if digestFile != "" {
			if err := os.WriteFile(digestFile, []byte(digest.String()+"\n"), 0o644); err != nil {
				return err
			}
		}
		if push != "" {
			if err := pushIndex(push, res.index, insecure, caFile); err != nil {
				return err
			}
			fmt.Printf("pushed\t%s@%s\n", push, digest)
		}
		return nil
	}(); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

// sourceDateEpoch is SOURCE_DATE_EPOCH (https://reproducible-builds.org/specs/source-date-epoch/),
// required: an image stamped with the build's own clock would differ on every build.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Time{}, errors.New("SOURCE_DATE_EPOCH is not set (the commit's time: git log -1 --format=%ct)")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a non-negative number of seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

func parseBinaryFlag(s string) (platformBinary, error) {
	plat, path, ok := strings.Cut(s, "=")
	osName, arch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || path == "" || osName == "" || arch == "" {
		return platformBinary{}, fmt.Errorf("-binary %q: want OS/ARCH=PATH", s)
	}
	return platformBinary{platform: v1.Platform{OS: osName, Architecture: arch}, path: path}, nil
}

// pushIndex writes the index and its images to ref. Credentials come from the Docker config
// (docker login, or the workflow's login step), as with every registry client.
func pushIndex(ref string, idx v1.ImageIndex, insecure bool, caFile string) error {
	var nameOpts []name.Option
	if insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return err
	}
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-ca-file %s: no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return remote.WriteIndex(r, idx, remote.WithTransport(tr), remote.WithAuthFromKeychain(authn.DefaultKeychain))
}

// writeLayout writes the index into a fresh OCI image layout at dir; the layout's index.json
// points at it, named by refName (org.opencontainers.image.ref.name) when set.
func writeLayout(dir string, idx v1.ImageIndex, refName string) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("-out %s is not empty (a layout appended to would list the index twice)", dir)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	return writeLayoutIndex(dir, idx, refName)
}
