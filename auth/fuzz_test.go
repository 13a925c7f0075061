package auth

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzVerify feeds Verify tokens of any shape: it must refuse, never
// panic, all but tokens signed by its key; and what it accepts must grant
// something to someone, unexpired.
func FuzzVerify(f *testing.F) {
	dir := f.TempDir()
	priv, pub, err := GenerateEd25519()
	if err != nil {
		f.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "k.key"), priv, 0o600)
	os.WriteFile(filepath.Join(dir, "k.pub"), pub, 0o600)
	k, err := LoadSigningKey(filepath.Join(dir, "k.key"))
	if err != nil {
		f.Fatal(err)
	}
	keys, err := LoadKeys(filepath.Join(dir, "k.pub"))
	if err != nil {
		f.Fatal(err)
	}
	good, err := k.Mint(claims(Read|Append, "app=orders,prefix=orders/", time.Hour))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := keys.Verify(token)
		if err != nil {
			return
		}
		if c.Validate() != nil || c.ExpiresAt == nil || c.ExpiresAt.Before(time.Now().Add(-Leeway)) {
			t.Fatalf("Verify accepted claims %+v", c)
		}
	})
}

// FuzzClaimsJSON decodes claims of any shape: an error or claims that
// encode and decode again to the same, never a panic.
func FuzzClaimsJSON(f *testing.F) {
	f.Add([]byte(`{"sub":"a","exp":1795000000,"cap":["READ","APP16"],"sel":"app=x,prefix=a/"}`))
	f.Add([]byte(`{"cap":["read"," append "],"sel":"a in (b,c),!d"}`))
	f.Add([]byte(`{"cap":"READ"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Claims
		if json.Unmarshal(data, &c) != nil {
			return
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal of decoded claims %+v: %v", c, err)
		}
		var d Claims
		if err := json.Unmarshal(again, &d); err != nil {
			t.Fatalf("claims %s do not decode again: %v", again, err)
		}
		if d.Capability != c.Capability || d.Selector.String() != c.Selector.String() || d.Subject != c.Subject {
			t.Fatalf("claims %+v became %+v", c, d)
		}
	})
}

// FuzzParseCapability feeds ParseCapability any text, as a token's claims
// or `quire auth mint --grant` carry it: it must refuse or parse, never
// panic; what it parses grants something, only rights Quire defines or
// application bits, and prints as names that parse back to it.
func FuzzParseCapability(f *testing.F) {
	for _, s := range []string{"READ,APPEND", "list, app16", "APP31", "APP15", "APP016", "BIT8", "", ",", "READ,,APPEND", "UNASSIGN,STAT,REPLICATE,APPLY"} {
		f.Add(s)
	}
	reserved := ^(All | Capability(^uint32(0)>>FirstApplicationBit<<FirstApplicationBit))
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCapability(s)
		if err != nil {
			return
		}
		if c == 0 || c&reserved != 0 {
			t.Fatalf("ParseCapability(%q) = %#x, granting nothing or reserved bits", s, uint32(c))
		}
		if back, err := ParseCapability(c.String()); err != nil || back != c {
			t.Fatalf("ParseCapability(%q) = %s, which parses as %#x, %v", s, c, uint32(back), err)
		}
	})
}

// FuzzParseKeys feeds parseKeys key files of any content: it must refuse
// or read them, never panic, and every key it reads can verify, under a
// known algorithm and a fingerprint of its kind.
func FuzzParseKeys(f *testing.F) {
	_, pub, err := GenerateEd25519()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pub)
	f.Add(append(append([]byte{}, pub...), pub...))
	f.Add([]byte("a secret of at least thirty-two bytes, for HMAC"))
	f.Add([]byte("short"))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := parseKeys(data)
		if err != nil {
			return
		}
		if len(keys) == 0 {
			t.Fatalf("parseKeys(%q) read no key, and no error", data)
		}
		for _, k := range keys {
			if k.method() == nil || k.verify == nil || k.id == "" {
				t.Fatalf("parseKeys(%q) read key %+v", data, k)
			}
		}
	})
}

// FuzzParseToken feeds parseToken token files of any content: what it
// reads is one token, without white space.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"eyJ.a.b\n", " two tokens ", "", "\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := parseToken(data)
		if err == nil && (tok == "" || strings.ContainsAny(tok, " \t\r\n")) {
			t.Fatalf("parseToken(%q) = %q", data, tok)
		}
	})
}
