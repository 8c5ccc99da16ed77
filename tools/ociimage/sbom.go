package main

// An SPDX 2.3 JSON SBOM per image, listing the Go modules linked into its binary as the
// binary's embedded build info records them (what `go version -m` prints): the main module and
// every dependency with its version (a replaced module with its replacement's path and version,
// the code actually built), each with its purl. Nothing in it depends on when or where it is
// written, so it is as reproducible as the image.

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"
)

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
	Comment  string   `json:"comment,omitempty"`
}

type spdxPackage struct {
	Name             string            `json:"name"`
	SPDXID           string            `json:"SPDXID"`
	VersionInfo      string            `json:"versionInfo"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	Checksums        []spdxChecksum    `json:"checksums,omitempty"`
	ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
	Comment          string            `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// goModule is one module of a binary's build info, after replacement.
type goModule struct{ Path, Version string }

// binaryModules returns the main module and the dependencies the binary's build info records.
func binaryModules(bi *debug.BuildInfo) (main goModule, deps []goModule) {
	main = goModule{bi.Main.Path, bi.Main.Version}
	for _, d := range bi.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		deps = append(deps, goModule{m.Path, m.Version})
	}
	return main, deps
}

// spdxForBinary is the SBOM of one platform's image.
func spdxForBinary(bin []byte, imageName, platform string, imageDigest string, created time.Time) (*spdxDocument, error) {
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return nil, fmt.Errorf("reading the binary's build info: %w", err)
	}
	sum := sha256.Sum256(bin)
	main, deps := binaryModules(bi)
	doc := &spdxDocument{
		SPDXVersion: "SPDX-2.3",
		DataLicense: "CC0-1.0",
		SPDXID:      "SPDXRef-DOCUMENT",
		Name:        imageName + " " + platform,
		// Unique per binary, and the same for the same binary (no random UUID).
		DocumentNamespace: "https://spdx.org/spdxdocs/" + imageName + "-" + strings.ReplaceAll(platform, "/", "-") + "-" + hex.EncodeToString(sum[:]),
		CreationInfo: spdxCreationInfo{
			Created:  created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: ociimage (shared-resource-csi tools/ociimage)"},
			Comment:  "Go modules from the build info embedded in /" + imageName + " (" + bi.GoVersion + "); image " + imageDigest,
		},
	}
	mainID := "SPDXRef-Package-main"
	doc.Packages = append(doc.Packages, spdxPackage{
		Name: main.Path, SPDXID: mainID, VersionInfo: main.Version, DownloadLocation: "NOASSERTION",
		Checksums:    []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hex.EncodeToString(sum[:])}},
		ExternalRefs: []spdxExternalRef{purl(main)},
		Comment:      "the main module: the binary /" + imageName + " (the checksum is the binary's)",
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", mainID})
	for i, d := range deps {
		id := fmt.Sprintf("SPDXRef-Package-%d", i+1)
		doc.Packages = append(doc.Packages, spdxPackage{
			Name: d.Path, SPDXID: id, VersionInfo: d.Version, DownloadLocation: "NOASSERTION",
			ExternalRefs: []spdxExternalRef{purl(d)},
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{mainID, "DEPENDS_ON", id})
	}
	return doc, nil
}

func purl(m goModule) spdxExternalRef {
	loc := "pkg:golang/" + m.Path
	if m.Version != "" && m.Version != "(devel)" {
		loc += "@" + m.Version
	}
	return spdxExternalRef{"PACKAGE-MANAGER", "purl", loc}
}

// sbomFileName is where writeSBOMs puts platform's SBOM.
func sbomFileName(imageName, platform string) string {
	return imageName + "-" + strings.ReplaceAll(platform, "/", "-") + ".spdx.json"
}

func writeSBOMs(dir, imageName string, res *buildResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, img := range res.images {
		created, err := img.image.ConfigFile()
		if err != nil {
			return err
		}
		doc, err := spdxForBinary(img.binary, imageName, img.platform, img.digest.String(), created.Created.Time)
		if err != nil {
			return fmt.Errorf("%s: %w", img.platform, err)
		}
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, sbomFileName(imageName, img.platform)), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}
