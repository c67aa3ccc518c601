package erofs

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
)

// On-disk constants (Linux fs/erofs/erofs_fs.h).
const (
	blockBits   = 12
	blockSize   = 1 << blockBits
	superOffset = 1024
	superMagic  = 0xE0F5E1E2
	inodeSize   = 64 // extended inode
	direntSize  = 12
	maxNameLen  = 255

	layoutFlatPlain  = 0
	layoutFlatInline = 2

	xattrIndexTrusted = 4

	ftUnknown = 0
	ftReg     = 1
	ftDir     = 2
	ftChr     = 3
	ftBlk     = 4
	ftFifo    = 5
	ftSock    = 6
	ftSymlink = 7
)

// SuperMagic is the f_type statfs reports for a mounted EROFS filesystem.
const SuperMagic = superMagic

// Inline limits: a regular file this small is stored after its inode, as
// long as the inline bytes held in memory stay under maxInlineTotal.
const (
	maxInlineFile  = 2048
	maxInlineTotal = 64 << 20
)

// OCI markers.
const (
	whPrefix = ".wh."
	whOpaque = ".wh..wh..opq"
)

// Options bounds what one tar stream may create. Zero values mean the
// defaults of image.Unpack (the caller passes its own).
type Options struct {
	MaxEntries    int64
	MaxFileSize   int64
	MaxTotalBytes int64
}

func (o Options) withDefaults() Options {
	if o.MaxEntries <= 0 {
		o.MaxEntries = 5_000_000
	}
	if o.MaxFileSize <= 0 {
		o.MaxFileSize = 16 << 30
	}
	if o.MaxTotalBytes <= 0 {
		o.MaxTotalBytes = 64 << 30
	}
	return o
}

// Stats describes a written image.
type Stats struct {
	Entries int64  // tar entries read
	Inodes  int    // inodes written
	Bytes   int64  // image size
	Digest  string // the image's digest (see Digest), computed while writing
}

type node struct {
	mode      uint32 // S_IF* | permission bits
	uid, gid  uint32
	mtime     int64
	mtimeNsec uint32
	size      uint64
	blkaddr   uint32
	inline    []byte // data stored after the inode (FLAT_INLINE), or nil
	hasInline bool
	children  map[string]*node
	opaque    bool
	whiteout  bool // a 0:0 char device made from an OCI whiteout

	// layout
	nlink  uint32
	nid    uint64
	ino    uint32
	placed bool
	parent *node
}

const (
	sIFMT   = 0o170000
	sIFDIR  = 0o040000
	sIFREG  = 0o100000
	sIFLNK  = 0o120000
	sIFCHR  = 0o020000
	sIFIFO  = 0o010000
	permAll = 0o7777
)

func (n *node) isDir() bool { return n.mode&sIFMT == sIFDIR }

type builder struct {
	ctx     context.Context
	f       *os.File
	opts    Options
	root    *node
	next    uint32 // next free data block
	total   int64
	inlined int64
	entries int64
	buf     []byte
	rest    hash.Hash // of the image from block 1 on, written in order
	hashed  int64     // image offset rest has covered
}

// FromTar reads an uncompressed tar stream and writes its EROFS image into
// f, an empty file opened for writing (it is extended with holes where
// file data is all zeros, then truncated to the image size). On error what
// was written to f is not an image and must be discarded.
func FromTar(ctx context.Context, r io.Reader, f *os.File, opts Options) (Stats, error) {
	b := &builder{
		ctx:  ctx,
		f:    f,
		opts: opts.withDefaults(),
		root: &node{mode: sIFDIR | 0o755, children: map[string]*node{}},
		next: 1, // block 0 holds the superblock
		buf:  make([]byte, 256<<10),
		rest: sha256.New(),
	}
	b.hashed = blockSize
	b.root.parent = b.root
	tr := tar.NewReader(r)
	for {
		if b.entries%512 == 0 {
			if err := ctx.Err(); err != nil {
				return Stats{}, err
			}
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Stats{}, errdefs.InvalidArgument("malformed layer tar: %w", err)
		}
		b.entries++
		if b.entries > b.opts.MaxEntries {
			return Stats{}, errdefs.ResourceExhausted("layer has more than %d entries", b.opts.MaxEntries)
		}
		if err := b.entry(hdr, tr); err != nil {
			return Stats{}, fmt.Errorf("erofs: %q: %w", hdr.Name, err)
		}
	}
	size, inodes, digest, err := b.finish()
	if err != nil {
		return Stats{}, fmt.Errorf("erofs: %w", err)
	}
	return Stats{Entries: b.entries, Inodes: inodes, Bytes: size, Digest: digest}, nil
}

// Digest computes an image's digest from its bytes: the hex sha256 of the
// concatenation of block 0 (the superblock) and the sha256 of everything
// after it. It covers every byte of the image; the split lets FromTar compute it
// while writing (block 0 is written last). The image file must be exactly
// the image (FromTar truncates it so).
func Digest(r io.ReaderAt, size int64) (string, error) {
	if size < blockSize || size%blockSize != 0 {
		return "", errdefs.InvalidArgument("erofs: an image of %d bytes is not whole blocks", size)
	}
	head := make([]byte, blockSize)
	if _, err := r.ReadAt(head, 0); err != nil {
		return "", err
	}
	rest := sha256.New()
	if _, err := io.Copy(rest, io.NewSectionReader(r, blockSize, size-blockSize)); err != nil {
		return "", err
	}
	return digestOf(head, rest), nil
}

func digestOf(head []byte, rest hash.Hash) string {
	h := sha256.New()
	h.Write(head)
	h.Write(rest.Sum(nil))
	return hex.EncodeToString(h.Sum(nil))
}

var zeroBlock [blockSize]byte

// hashTo feeds rest with the image bytes up to offset end that were not
// written (holes and padding): zeros.
func (b *builder) hashTo(end int64) {
	for b.hashed < end {
		n := min(end-b.hashed, blockSize)
		b.rest.Write(zeroBlock[:n])
		b.hashed += n
	}
}

// hashed bytes p, which the image holds at offset off == b.hashed.
func (b *builder) hashWrite(p []byte, off int64) {
	b.hashTo(off)
	b.rest.Write(p)
	b.hashed += int64(len(p))
}

// cleanName is image.Unpack's rule (image.CleanName), plus the bound on
// a name component's length that an EROFS directory entry has.
func cleanName(name string) (string, error) {
	c, err := image.CleanName(name)
	if err != nil {
		return "", err
	}
	for _, part := range strings.Split(c, "/") {
		if len(part) > maxNameLen {
			return "", errdefs.InvalidArgument("a name component is longer than %d bytes", maxNameLen)
		}
	}
	return c, nil
}

// dir returns the directory node at the clean path p, creating missing
// directories (mode 0755, root-owned, like a parent image.Unpack makes) when
// create is set. A component that exists and is not a directory (a
// symlink included) is refused.
func (b *builder) dir(p string, create bool) (*node, error) {
	d := b.root
	if p == "." {
		return d, nil
	}
	for _, part := range strings.Split(p, "/") {
		c := d.children[part]
		if c == nil {
			if !create {
				return nil, errdefs.InvalidArgument("%s: no such directory in the layer", p)
			}
			c = &node{mode: sIFDIR | 0o755, children: map[string]*node{}, parent: d}
			d.children[part] = c
		} else if !c.isDir() {
			return nil, errdefs.InvalidArgument("%s: a parent is not a directory in this layer", p)
		}
		d = c
	}
	return d, nil
}

func attrs(n *node, hdr *tar.Header) {
	n.uid, n.gid = uint32(hdr.Uid), uint32(hdr.Gid)
	n.mode = n.mode&sIFMT | uint32(hdr.Mode&permAll)
	ns := hdr.ModTime.UnixNano()
	if hdr.ModTime.IsZero() {
		ns = 0
	}
	n.mtime = ns / 1e9
	nsec := ns % 1e9
	if nsec < 0 {
		n.mtime--
		nsec += 1e9
	}
	n.mtimeNsec = uint32(nsec)
}

func (b *builder) entry(hdr *tar.Header, r io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	dirName, base := path.Dir(name), path.Base(name)
	if strings.HasPrefix(base, whPrefix) {
		return b.whiteout(dirName, base)
	}
	if name == "." {
		if hdr.Typeflag == tar.TypeDir {
			return nil // the root's metadata is the image's own
		}
		return errdefs.InvalidArgument("non-directory entry for the layer root")
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || int64(hdr.Uid) > 1<<32-2 || int64(hdr.Gid) > 1<<32-2 {
		return errdefs.InvalidArgument("uid/gid out of range")
	}
	parent, err := b.dir(dirName, true)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		n := parent.children[base]
		if n == nil || !n.isDir() {
			n = &node{mode: sIFDIR, children: map[string]*node{}, parent: parent}
			parent.children[base] = n
		}
		attrs(n, hdr)
		return nil
	//lint:ignore SA1019 old archives still carry TypeRegA (NUL) for regular files
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		n := &node{mode: sIFREG}
		attrs(n, hdr)
		if err := b.data(n, hdr.Size, r); err != nil {
			return err
		}
		parent.children[base] = n
		return nil
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 || len(hdr.Linkname) >= blockSize {
			return errdefs.InvalidArgument("invalid symlink target")
		}
		n := &node{mode: sIFLNK}
		attrs(n, hdr)
		n.mode = sIFLNK | 0o777
		if err := b.data(n, int64(len(hdr.Linkname)), strings.NewReader(hdr.Linkname)); err != nil {
			return err
		}
		parent.children[base] = n
		return nil
	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hardlink target: %w", err)
		}
		if target == "." || target == name {
			return errdefs.InvalidArgument("invalid hardlink target %q", hdr.Linkname)
		}
		td, err := b.dir(path.Dir(target), false)
		if err != nil {
			return fmt.Errorf("hardlink target: %w", err)
		}
		t := td.children[path.Base(target)]
		if t == nil {
			return errdefs.InvalidArgument("hardlink target %q is not in the layer", hdr.Linkname)
		}
		if t.isDir() || t.whiteout {
			return errdefs.InvalidArgument("hardlink to a directory or a whiteout")
		}
		parent.children[base] = t
		return nil
	case tar.TypeFifo:
		n := &node{mode: sIFIFO}
		attrs(n, hdr)
		parent.children[base] = n
		return nil
	case tar.TypeChar, tar.TypeBlock:
		if hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0 {
			parent.children[base] = &node{mode: sIFCHR, whiteout: true}
			return nil
		}
		return errdefs.InvalidArgument("device nodes are not allowed in layers")
	default:
		return errdefs.InvalidArgument("unsupported tar entry type %q", string(hdr.Typeflag))
	}
}

func (b *builder) whiteout(dirName, base string) error {
	if base == whOpaque {
		d, err := b.dir(dirName, true)
		if err != nil {
			return err
		}
		d.opaque = true
		return nil
	}
	target := strings.TrimPrefix(base, whPrefix)
	if target == "" || target == "." || target == ".." || strings.HasPrefix(target, whPrefix) {
		return errdefs.InvalidArgument("invalid whiteout %q", base)
	}
	d, err := b.dir(dirName, true)
	if err != nil {
		return err
	}
	if d.children[target] != nil {
		return nil // a whiteout hides lower layers only
	}
	d.children[target] = &node{mode: sIFCHR, whiteout: true}
	return nil
}

// data stores n's content: inline in memory if small, else at the next
// free blocks of the image, skipping all-zero blocks (holes).
func (b *builder) data(n *node, size int64, r io.Reader) error {
	if size < 0 || size > b.opts.MaxFileSize {
		return errdefs.ResourceExhausted("file of %d bytes exceeds the %d byte limit", size, b.opts.MaxFileSize)
	}
	if b.total+size > b.opts.MaxTotalBytes {
		return errdefs.ResourceExhausted("layer exceeds the %d byte limit", b.opts.MaxTotalBytes)
	}
	b.total += size
	n.size = uint64(size)
	if size == 0 {
		return nil
	}
	limit := int64(maxInlineFile)
	if n.mode&sIFMT == sIFLNK {
		limit = blockSize - inodeSize
	}
	if size <= limit && b.inlined+size <= maxInlineTotal {
		buf := make([]byte, size)
		if _, err := io.ReadFull(r, buf); err != nil {
			return errdefs.InvalidArgument("truncated layer tar: %w", err)
		}
		n.inline, n.hasInline = buf, true
		b.inlined += size
		return nil
	}
	blocks := (uint64(size) + blockSize - 1) / blockSize
	if uint64(b.next)+blocks >= 1<<32 {
		return errdefs.ResourceExhausted("layer too large for a 32-bit block address")
	}
	n.blkaddr = b.next
	b.next += uint32(blocks)
	off := int64(n.blkaddr) * blockSize
	var done int64
	for done < size {
		if done%(1<<20) == 0 {
			if err := b.ctx.Err(); err != nil {
				return err
			}
		}
		c, err := io.ReadFull(r, b.buf[:min(int64(len(b.buf)), size-done)])
		if c > 0 {
			if err := b.writeSparse(b.buf[:c], off+done); err != nil {
				return err
			}
			b.hashWrite(b.buf[:c], off+done)
			done += int64(c)
		}
		if err != nil && done < size {
			return errdefs.InvalidArgument("truncated layer tar: %w", err)
		}
	}
	return nil
}

// writeSparse writes p at off, leaving block-aligned all-zero runs as holes.
func (b *builder) writeSparse(p []byte, off int64) error {
	for len(p) > 0 {
		// Split at the next block boundary.
		k := min(int64(len(p)), blockSize-off%blockSize)
		chunk := p[:k]
		if !allZero(chunk) {
			// Coalesce consecutive non-zero chunks into one write.
			end := k
			for end < int64(len(p)) {
				nk := min(int64(len(p))-end, blockSize)
				if allZero(p[end : end+nk]) {
					break
				}
				end += nk
			}
			if _, err := b.f.WriteAt(p[:end], off); err != nil {
				return fmt.Errorf("write image: %w", err)
			}
			k = end
		}
		p, off = p[k:], off+k
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func fileType(n *node) uint8 {
	switch n.mode & sIFMT {
	case sIFREG:
		return ftReg
	case sIFDIR:
		return ftDir
	case sIFLNK:
		return ftSymlink
	case sIFCHR:
		return ftChr
	case sIFIFO:
		return ftFifo
	}
	return ftUnknown
}

type dirent struct {
	name string
	n    *node
}

// opaqueXattr is the inline xattr body of an opaque directory:
// trusted.overlay.opaque = "y".
var opaqueXattr = func() []byte {
	const name = "overlay.opaque"
	b := make([]byte, 12, 32)                         // ibody header: no name filter, no shared xattrs
	b = append(b, byte(len(name)), xattrIndexTrusted) // e_name_len, e_name_index
	b = binary.LittleEndian.AppendUint16(b, 1)        // e_value_size
	b = append(b, name...)
	b = append(b, 'y')
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}()

func (n *node) xattrSize() int {
	if n.opaque {
		return len(opaqueXattr)
	}
	return 0
}

// finish lays out directories and inodes after the data and writes them
// and the superblock. It returns the image size and the inode count.
func (b *builder) finish() (int64, int, string, error) {
	// Breadth-first order of unique nodes, root first; count links.
	order := []*node{b.root}
	b.root.placed = true
	for i := 0; i < len(order); i++ {
		d := order[i]
		if !d.isDir() {
			continue
		}
		d.nlink = 2
		names := make([]string, 0, len(d.children))
		for name := range d.children {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			c := d.children[name]
			if c.isDir() {
				d.nlink++
				c.parent = d
			} else {
				c.nlink++
			}
			if !c.placed {
				c.placed = true
				order = append(order, c)
			}
		}
	}
	if len(order) >= 1<<32-1 {
		return 0, 0, "", errdefs.ResourceExhausted("too many inodes")
	}

	// Directory sizes: entries sorted by name ("." and ".." included),
	// packed into blocks.
	type dirLayout struct {
		ents   []dirent
		blocks [][2]int // [start, end) indexes into ents per block
	}
	layouts := map[*node]*dirLayout{}
	for _, d := range order {
		if !d.isDir() {
			continue
		}
		ents := make([]dirent, 0, len(d.children)+2)
		ents = append(ents, dirent{".", d}, dirent{"..", d.parent})
		for name, c := range d.children {
			ents = append(ents, dirent{name, c})
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].name < ents[j].name })
		l := &dirLayout{ents: ents}
		start, used := 0, 0
		for i, e := range ents {
			need := direntSize + len(e.name)
			if used+need > blockSize {
				l.blocks = append(l.blocks, [2]int{start, i})
				start, used = i, 0
			}
			used += need
		}
		l.blocks = append(l.blocks, [2]int{start, len(ents)})
		d.size = uint64(len(l.blocks)-1)*blockSize + uint64(used)
		if uint64(b.next)+uint64(len(l.blocks)) >= 1<<32 {
			return 0, 0, "", errdefs.ResourceExhausted("layer too large for a 32-bit block address")
		}
		d.blkaddr = b.next
		b.next += uint32(len(l.blocks))
		layouts[d] = l
	}

	// Inodes: 32-byte aligned, an inode with its xattrs and inline data
	// never crosses a block boundary.
	metaBlk := b.next
	// The kernel reports a nid as the inode number; nid 0 would give the
	// root inode number 0, which readdir callers take for a deleted entry.
	pos := uint64(32)
	for i, n := range order {
		isz := uint64(inodeSize + n.xattrSize() + len(n.inline))
		pos = (pos + 31) &^ 31
		if pos%blockSize+isz > blockSize {
			pos = (pos + blockSize - 1) &^ (blockSize - 1)
		}
		n.nid = pos / 32
		n.ino = uint32(i + 1)
		pos += isz
	}
	if order[0].nid != 1 {
		return 0, 0, "", errdefs.Internal("root inode not first")
	}
	metaBlocks := (pos + blockSize - 1) / blockSize
	if uint64(metaBlk)+metaBlocks >= 1<<32 {
		return 0, 0, "", errdefs.ResourceExhausted("layer too large for a 32-bit block address")
	}
	totalBlocks := uint64(metaBlk) + metaBlocks

	// Directory blocks.
	dirStart := uint32(0)
	for _, d := range order {
		if d.isDir() {
			dirStart = d.blkaddr
			break
		}
	}
	if dirStart != 0 {
		dbuf := make([]byte, int(metaBlk-dirStart)*blockSize)
		for _, d := range order {
			l := layouts[d]
			if l == nil {
				continue
			}
			base := int(d.blkaddr-dirStart) * blockSize
			for bi, blk := range l.blocks {
				out := dbuf[base+bi*blockSize : base+(bi+1)*blockSize]
				nameoff := direntSize * (blk[1] - blk[0])
				for k, e := range l.ents[blk[0]:blk[1]] {
					de := out[k*direntSize:]
					binary.LittleEndian.PutUint64(de[0:], e.n.nid)
					binary.LittleEndian.PutUint16(de[8:], uint16(nameoff))
					de[10] = fileType(e.n)
					copy(out[nameoff:], e.name)
					nameoff += len(e.name)
				}
			}
		}
		if _, err := b.f.WriteAt(dbuf, int64(dirStart)*blockSize); err != nil {
			return 0, 0, "", fmt.Errorf("write image: %w", err)
		}
		b.hashWrite(dbuf, int64(dirStart)*blockSize)
	}

	// Inodes.
	meta := make([]byte, metaBlocks*blockSize)
	for _, n := range order {
		o := meta[n.nid*32:]
		layout := layoutFlatPlain
		if n.hasInline {
			layout = layoutFlatInline
		}
		le := binary.LittleEndian
		le.PutUint16(o[0:], uint16(1|layout<<1))
		if xs := n.xattrSize(); xs > 0 {
			le.PutUint16(o[2:], uint16(1+(xs-12)/4))
		}
		le.PutUint16(o[4:], uint16(n.mode))
		le.PutUint64(o[8:], n.size)
		le.PutUint32(o[16:], n.blkaddr) // raw_blkaddr; rdev 0 for whiteouts and fifos
		if n.mode&sIFMT == sIFCHR || n.mode&sIFMT == sIFIFO {
			le.PutUint32(o[16:], 0)
		}
		le.PutUint32(o[20:], n.ino)
		le.PutUint32(o[24:], n.uid)
		le.PutUint32(o[28:], n.gid)
		le.PutUint64(o[32:], uint64(n.mtime))
		le.PutUint32(o[40:], n.mtimeNsec)
		le.PutUint32(o[44:], n.nlink)
		p := inodeSize
		if n.opaque {
			copy(o[p:], opaqueXattr)
			p += len(opaqueXattr)
		}
		copy(o[p:], n.inline)
	}
	if _, err := b.f.WriteAt(meta, int64(metaBlk)*blockSize); err != nil {
		return 0, 0, "", fmt.Errorf("write image: %w", err)
	}
	b.hashWrite(meta, int64(metaBlk)*blockSize)

	// Superblock.
	sb := make([]byte, blockSize)
	s := sb[superOffset:]
	le := binary.LittleEndian
	le.PutUint32(s[0:], superMagic)
	s[12] = blockBits
	le.PutUint16(s[14:], uint16(b.root.nid))
	le.PutUint64(s[16:], uint64(len(order)))
	le.PutUint32(s[36:], uint32(totalBlocks))
	le.PutUint32(s[40:], metaBlk)
	copy(s[64:80], "berth-snapshot")
	if _, err := b.f.WriteAt(sb, 0); err != nil {
		return 0, 0, "", fmt.Errorf("write image: %w", err)
	}
	size := int64(totalBlocks) * blockSize
	if err := b.f.Truncate(size); err != nil {
		return 0, 0, "", fmt.Errorf("write image: %w", err)
	}
	if b.hashed != size {
		return 0, 0, "", errdefs.Internal("image digest covers %d of %d bytes", b.hashed, size)
	}
	return size, len(order), digestOf(sb, b.rest), nil
}
