package main

// The image of one platform and the index of all of them, made from go-containerregistry's
// empty image and index: no base is pulled, and every byte is derived from the binaries and
// the options, so equal inputs give equal digests.

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type platformBinary struct {
	platform v1.Platform
	path     string
}

type options struct {
	name                      string    // the binary's path in the image is /name
	version, revision, source string    // OCI annotations and labels
	created                   time.Time // SOURCE_DATE_EPOCH: every timestamp in the images
}

// builtImage is one platform's image and what its SBOM and the summary need.
type builtImage struct {
	platform   string // os/arch
	image      v1.Image
	digest     v1.Hash
	layerSize  int64 // compressed (gzip), as pulled
	binarySize int64
	binary     []byte
}

type buildResult struct {
	index  v1.ImageIndex
	images []builtImage
}

// buildIndex makes one image per binary and the OCI image index of them, in the order given.
func buildIndex(plats []platformBinary, o options) (*buildResult, error) {
	seen := map[string]bool{}
	res := &buildResult{}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range plats {
		key := p.platform.OS + "/" + p.platform.Architecture
		if seen[key] {
			return nil, fmt.Errorf("platform %s given twice", key)
		}
		seen[key] = true
		bin, err := os.ReadFile(p.path)
		if err != nil {
			return nil, err
		}
		// The image has nothing but the binary: a dynamically linked one would not start.
		if err := checkStaticBinary(bin, p.platform); err != nil {
			return nil, fmt.Errorf("%s (%s): %w", p.path, key, err)
		}
		img, err := platformImage(bin, p.platform, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		layers, err := img.Layers()
		if err != nil {
			return nil, err
		}
		size, err := layers[0].Size()
		if err != nil {
			return nil, err
		}
		plat := p.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &plat},
		})
		res.images = append(res.images, builtImage{platform: key, image: img, digest: d,
			layerSize: size, binarySize: int64(len(bin)), binary: bin})
	}
	res.index = mutate.Annotations(idx, o.annotations()).(v1.ImageIndex)
	return res, nil
}

// annotations are the OCI pre-defined ones a registry UI and `crane manifest` show.
func (o options) annotations() map[string]string {
	a := map[string]string{"org.opencontainers.image.created": o.created.Format(time.RFC3339)}
	for k, v := range map[string]string{
		"org.opencontainers.image.version":  o.version,
		"org.opencontainers.image.revision": o.revision,
		"org.opencontainers.image.source":   o.source,
	} {
		if v != "" {
			a[k] = v
		}
	}
	return a
}

// platformImage is an OCI image whose one layer holds the binary at /name, its entrypoint, as
// the Dockerfile's scratch image and tools/mkimage's image have it (user root: the driver's
// pod is privileged and makes mounts).
func platformImage(bin []byte, p v1.Platform, o options) (v1.Image, error) {
	layerTar, err := binaryLayerTar(bin, o.name, o.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      v1.Time{Time: o.created},
		Config: v1.Config{
			Entrypoint: []string{"/" + o.name},
			Labels:     o.annotations(),
		},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: o.created},
			CreatedBy: "ociimage: /" + o.name + " (static binary)",
		},
		MediaType: types.OCILayer,
	})
}

// binaryLayerTar is the layer's tar: the one file, owned by root, mode 0755, dated created.
func binaryLayerTar(bin []byte, name string, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Mode:     0o755,
		Size:     int64(len(bin)),
		ModTime:  created,
		Format:   tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeLayoutIndex(dir string, idx v1.ImageIndex, refName string) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	var opts []layout.Option
	if refName != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": refName}))
	}
	return p.AppendIndex(idx, opts...)
}
