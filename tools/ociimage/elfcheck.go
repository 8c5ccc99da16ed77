package main

// A binary goes into an image with no libc and no loader only if it needs neither, and into a
// platform's image only if it is that platform's.

import (
	"bytes"
	"debug/elf"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// elfMachines maps a GOARCH to the ELF machine and byte order its binaries have.
var elfMachines = map[string]struct {
	machine elf.Machine
	order   elf.Data
}{
	"amd64":   {elf.EM_X86_64, elf.ELFDATA2LSB},
	"arm64":   {elf.EM_AARCH64, elf.ELFDATA2LSB},
	"ppc64le": {elf.EM_PPC64, elf.ELFDATA2LSB},
	"s390x":   {elf.EM_S390, elf.ELFDATA2MSB},
}

// checkStaticBinary fails unless bin is an ELF executable for p with no program interpreter
// (PT_INTERP: the dynamic loader) and no shared library it needs.
func checkStaticBinary(bin []byte, p v1.Platform) error {
	if p.OS != "linux" {
		return fmt.Errorf("os %q: only linux images are built", p.OS)
	}
	want, ok := elfMachines[p.Architecture]
	if !ok {
		return fmt.Errorf("architecture %q: not one of amd64, arm64, ppc64le, s390x", p.Architecture)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	if f.Machine != want.machine || f.Data != want.order {
		return fmt.Errorf("ELF machine %v (%v), want %v (%v) for %s", f.Machine, f.Data, want.machine, want.order, p.Architecture)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked (PT_INTERP): build it with CGO_ENABLED=0")
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("needs shared libraries %v: build it with CGO_ENABLED=0", libs)
	}
	return nil
}
