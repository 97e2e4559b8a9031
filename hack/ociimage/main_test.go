package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func readTar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
		if h.Typeflag == tar.TypeSymlink {
			files[h.Name] = []byte("-> " + h.Linkname)
		}
	}
}

func TestWrite(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	g.Expect(os.MkdirAll(filepath.Join(root, "bin"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, "agnhost"), []byte("binary"), 0o755)).To(Succeed())
	g.Expect(os.Symlink("/bin/dash", filepath.Join(root, "bin", "sh"))).To(Succeed())
	out := filepath.Join(dir, "agnhost.tar")
	const name = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	g.Expect(Write(out, Options{Name: name, Root: root, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}})).To(Succeed())

	b, err := os.ReadFile(out)
	g.Expect(err).NotTo(HaveOccurred())
	files := readTar(t, b)
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	g.Expect(json.Unmarshal(files["index.json"], &index)).To(Succeed())
	g.Expect(index.Manifests).To(HaveLen(1))
	g.Expect(index.Manifests[0].Annotations).To(HaveKeyWithValue("io.containerd.image.name", name))
	g.Expect(index.Manifests[0].Annotations).To(HaveKeyWithValue("org.opencontainers.image.ref.name", "2.66.1"))
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	g.Expect(json.Unmarshal(files["blobs/sha256/"+index.Manifests[0].Digest[len("sha256:"):]], &manifest)).To(Succeed())
	g.Expect(manifest.Layers).To(HaveLen(1))
	var config struct {
		Config struct{ Entrypoint, Cmd []string }
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	g.Expect(json.Unmarshal(files["blobs/sha256/"+manifest.Config.Digest[len("sha256:"):]], &config)).To(Succeed())
	g.Expect(config.Config.Entrypoint).To(Equal([]string{"/agnhost"}))
	g.Expect(config.Config.Cmd).To(Equal([]string{"pause"}))
	g.Expect(config.RootFS.DiffIDs).To(Equal([]string{manifest.Layers[0].Digest}))
	layer := readTar(t, files["blobs/sha256/"+manifest.Layers[0].Digest[len("sha256:"):]])
	g.Expect(layer).To(HaveKeyWithValue("agnhost", []byte("binary")))
	g.Expect(layer).To(HaveKeyWithValue("bin/sh", []byte("-> /bin/dash")))
	g.Expect(layer).To(HaveKey("bin/"))

	g.Expect(Write(out, Options{Name: "registry.k8s.io/pause", Root: root})).To(MatchError(ContainSubstring("no tag")))
}
