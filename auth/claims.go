package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/golang-jwt/jwt/v5"

	"github.com/quire-dev/quire/labels"
)

// Claims are what a token grants: its Capability over the journals or
// shards that its Selector matches, for its Subject, between its times.
//
// In a token they are a JWT's claims: the registered sub, iat, nbf and exp,
// with cap, a list of capability names, and sel, the selector's text:
//
//	{"sub":"orders-writer","iat":1795000000,"exp":1795086400,
//	 "cap":["READ","APPEND"],"sel":"app=orders"}
//
// Selectors match labels together with meta-labels, so "prefix=orders/"
// bounds a token to the journals (or shards) whose names start with
// orders/. The empty selector matches everything.
type Claims struct {
	jwt.RegisteredClaims
	Capability Capability
	Selector   labels.Selector
}

// wireClaims is the JSON form of Claims.
type wireClaims struct {
	jwt.RegisteredClaims
	Cap []string `json:"cap"`
	Sel string   `json:"sel,omitempty"`
}

// MarshalJSON writes c as a token's claims.
func (c Claims) MarshalJSON() ([]byte, error) {
	return json.Marshal(wireClaims{RegisteredClaims: c.RegisteredClaims, Cap: c.Capability.Names(), Sel: c.Selector.String()})
}

// UnmarshalJSON reads a token's claims, and fails on a capability name or
// a selector it does not know.
func (c *Claims) UnmarshalJSON(data []byte) error {
	var w wireClaims
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	caps, err := ParseCapability(strings.Join(w.Cap, ","))
	if err != nil && len(w.Cap) > 0 {
		return fmt.Errorf("claim cap: %w", err)
	}
	sel, err := labels.ParseSelector(w.Sel)
	if err != nil {
		return fmt.Errorf("claim sel: %w", err)
	}
	*c = Claims{RegisteredClaims: w.RegisteredClaims, Capability: caps, Selector: sel}
	return nil
}

// Validate checks what the JWT library does not: that the claims grant
// something, to someone. It is called as tokens are verified, after their
// times are checked.
func (c Claims) Validate() error {
	switch {
	case c.Capability == 0:
		return errors.New("the token grants no capability (claim cap is empty)")
	case c.Subject == "":
		return errors.New("the token names no subject (claim sub is empty)")
	}
	return nil
}

// Allows tells whether c grants want over a journal or shard labelled set
// (with its meta-labels).
func (c *Claims) Allows(want Capability, set labels.Set) bool {
	return c.Capability.Has(want) && c.Selector.Matches(set)
}
