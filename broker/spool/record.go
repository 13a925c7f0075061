package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A commit record is
//
//	length   uint32  bytes that follow, up to and excluding the checksum
//	end      int64   committed end offset
//	sum      [32]byte SHA-256 of content [begin, end)
//	registers []byte the journal's registers, in canonical text
//	crc      uint32  CRC-32C of everything before it
//
// all little-endian. A record cut short by a crash, or damaged, fails its
// checksum and ends the log.
type record struct {
	end       int64
	sum       [32]byte
	registers string
}

const (
	recordFixed = 4 + 8 + 32 + 4
	// maxRegisters bounds a record's registers, so a damaged length cannot
	// make recovery allocate without bound.
	maxRegisters = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends to b the commit record of end, sum and the
// registers' text that appendRegisters appends (written in place, since a
// broker commits its registers with every append).
func appendRecord(b []byte, end int64, sum [32]byte, appendRegisters func([]byte) []byte) ([]byte, error) {
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, 0) // The length, once known.
	b = binary.LittleEndian.AppendUint64(b, uint64(end))
	b = append(b, sum[:]...)
	b = appendRegisters(b)
	n := len(b) - start - 4
	if n-8-32 > maxRegisters {
		return b[:start], fmt.Errorf("registers of %d bytes: a commit record holds at most %d", n-8-32, maxRegisters)
	}
	binary.LittleEndian.PutUint32(b[start:], uint32(n))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli)), nil
}

var errTornRecord = errors.New("torn or damaged commit record")

// decodeRecord decodes the record at the start of b, returning it and its
// encoded length.
func decodeRecord(b []byte) (record, int, error) {
	if len(b) < recordFixed {
		return record{}, 0, errTornRecord
	}
	n := binary.LittleEndian.Uint32(b)
	if n < 8+32 || n > 8+32+maxRegisters || uint64(len(b)) < 4+uint64(n)+4 {
		return record{}, 0, errTornRecord
	}
	body := b[:4+n]
	if binary.LittleEndian.Uint32(b[4+n:]) != crc32.Checksum(body, castagnoli) {
		return record{}, 0, errTornRecord
	}
	r := record{end: int64(binary.LittleEndian.Uint64(b[4:]))}
	copy(r.sum[:], b[12:44])
	r.registers = string(b[44 : 4+n])
	if r.end < 0 {
		return record{}, 0, fmt.Errorf("commit record with negative end %d", r.end)
	}
	return r, int(4 + n + 4), nil
}
