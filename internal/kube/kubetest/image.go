package kubetest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image is a container image of local files: no image can be pulled on a
// machine without a registry, so the real-node tests build theirs (the
// headroom binary for the agent and the workloads, and a pause image for
// the pods' sandboxes) and import the archive into containerd.
type Image struct {
	// Ref is the image's name as pods give it (e.g. headroom.test/headroom:v1).
	Ref string
	// Files maps a path in the image to a file on the host; each keeps its
	// mode (a binary stays executable).
	Files map[string]string
	// Entrypoint is the image's command.
	Entrypoint []string
}

// WriteArchive writes img as a docker image archive (what `ctr images
// import` and `docker load` take) at archivePath.
func (img Image) WriteArchive(archivePath string) error {
	tag, err := name.NewTag(img.Ref)
	if err != nil {
		return fmt.Errorf("image %q: %w", img.Ref, err)
	}
	layerTar, err := img.layer()
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	image, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := image.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config = v1.Config{Entrypoint: img.Entrypoint}
	if image, err = mutate.ConfigFile(image, cf); err != nil {
		return err
	}
	return tarball.WriteToFile(archivePath, tag, image)
}

// layer is the image's one layer: its files, and the directories above
// them, in a stable order.
func (img Image) layer() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	paths := make([]string, 0, len(img.Files))
	for p := range img.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	for _, p := range paths {
		var parents []string
		for d := path.Dir(path.Clean("/" + p)); d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: parents[i][1:] + "/", Mode: 0o755}); err != nil {
				return nil, err
			}
		}
		src := img.Files[p]
		fi, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Ref, err)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Ref, err)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Clean("/" + p)[1:], Mode: int64(fi.Mode().Perm()), Size: int64(len(b))}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
