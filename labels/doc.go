// Package labels implements label sets and selectors: their validation, their
// canonical text form, and matching.
//
// Journals and shards carry labels, and users pick journals and shards by
// selectors over those labels, as in
//
//	app=clicks, region in (us, eu), !deprecated
//
// A broker also keeps a label set per journal, its registers, which a
// conditional append checks with a selector and then updates by Set.Union
// and Set.Subtract. This package is only the logic; other packages convert
// sets and selectors to and from their own wire types.
//
// # Labels and sets
//
// A Label is a Name and a Value. A Set is a slice of labels sorted by name
// and then by value, holding each (name, value) pair at most once. A name
// may carry several values: region=eu and region=us in one set mean the
// labelled thing is in both regions. The zero Set, nil, is the empty set.
//
// Sets built by New or Parse are sorted and unique; Set.Validate checks a Set
// built any other way. The other methods of Set assume their receiver and
// arguments are sorted and unique; on other input their results are
// unspecified (but they do not panic). Methods never modify their receiver
// or their arguments, and sets they return share no memory with them.
//
// A name is 1 to 64 bytes of ASCII letters, digits and the characters
// '.', '_', '-', '/' and ':', beginning with a letter or a digit: "app",
// "quire.dev/region", "content-type". Names are case sensitive.
//
// A value is 0 to 1024 bytes of valid UTF-8 made of printable characters
// (unicode.IsPrint) other than the space and the five characters
// ',' '(' ')' '=' '!'. Since none of those appear in names or values, the
// text forms below need no quoting or escaping. The empty value is allowed in
// a set ("app=" is the label app with the empty value), but not in a
// selector, and Set.Subtract gives it a special meaning: a label with the
// empty value in the subtracted set removes every value of its name.
//
// # Selectors
//
// A Selector is a list of requirements, and matches a set when every one of
// its requirements holds for the set; the empty selector matches every set.
// Each Requirement names a label and applies an Op to its values in the set:
//
//	Exists     name               the set has name, with any value
//	NotExists  !name              the set does not have name
//	Equals     name=v             some value of name is v
//	NotEquals  name!=v            no value of name is v (true if name is absent)
//	In         name in (v, w)     some value of name is v or w
//	NotIn      name notin (v, w)  no value of name is v or w (true if name is absent)
//
// So NotEquals and NotIn are the negations of Equals and In, also for names
// with several values: region!=us does not match a set with region=eu and
// region=us. Requirements that contradict each other, such as app and !app,
// are allowed; the selector then matches no set.
//
// A selector is canonical when its requirements are sorted by name, then by
// op (in the order of the table above), then by values, with no requirement
// repeated, and each requirement's values are sorted and unique: one value
// for Equals and NotEquals, at least one for In and NotIn, none for Exists
// and NotExists. ParseSelector returns canonical selectors, and
// Selector.Validate checks that a selector built otherwise is one. Equals
// with value v and In with the single value v match the same sets but are
// different requirements, and each keeps its form.
//
// # Text forms
//
// Sets and selectors have a text form, written in EBNF as
//
//	set         = [ label { "," label } ] .
//	label       = name "=" [ value ] .
//
//	selector    = [ requirement { "," requirement } ] .
//	requirement = name                        // Exists
//	            | "!" name                    // NotExists
//	            | name ( "=" | "==" ) value   // Equals
//	            | name "!=" value             // NotEquals
//	            | name "in" list              // In
//	            | name "notin" list .         // NotIn
//	list        = "(" value { "," value } ")" .
//
// where name and value are as described above (value non-empty). White space
// (the ASCII space, tab, newline, carriage return, vertical tab and form feed)
// may appear before and after every token, and must separate a name from a
// following "in" or "notin", which would otherwise be part of the name. So
// the empty string, or only white space, is the empty set and the empty
// selector; a comma must separate two labels or requirements and may not
// follow the last one. The keywords "in" and "notin" are lower case and
// reserved only where an operator is expected: "in" is a valid label name,
// and "in in (a)" is a requirement on it.
//
// Parse and ParseSelector accept labels and requirements in any order and
// repeated, and return them sorted with repeats removed; values of a list are
// sorted and deduplicated too. In a selector, "==" is another spelling of
// "="; a set has only "=".
//
// Set.String and Selector.String write the canonical text form: no white
// space except the single spaces around "in" and "notin", labels and
// requirements in canonical order, separated by "," alone:
//
//	app=clicks,region=eu,region=us
//	app=clicks,!deprecated,region in (eu,us)
//
// Parsing the canonical form gives back an equal set or selector, and
// writing it again gives the same text.
//
// # Errors
//
// Parse and ParseSelector accept any input: they return either a value or an
// error, never panic, and use memory linear in the length of the input (and
// time O(n log n), to sort). An error
// quotes the input, gives the byte offset at which the problem was found,
// and says what was expected and what was found there:
//
//	selector "app=,x": at 4: expected a value after "app=", found ","
//	selector "a in (x": at 7: missing ")" to close "(" at 5
//	label set "a=b,a=(c)": at 6: invalid label value "(c)": character '(' is not allowed
//
// Long inputs and tokens are shortened in error messages. Errors from
// ValidateName and ValidateValue are wrapped (with %w) by the errors that
// report the label or requirement they were found in.
package labels
