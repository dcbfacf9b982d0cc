// Package luaform reads a Redis script the way Redis's Lua 5.1 reads it
// and prints its canonical form: two scripts with the same form do the
// same thing on Redis, reply for reply and write for write.
//
// The form is the script's syntax tree, written out, after rewrites that
// keep meaning exactly:
//   - whitespace, comments, quotes, escapes and line endings are gone
//     (strings and numbers are their values);
//   - a.b is a["b"], f"s" is f("s"), and parentheses that change nothing
//     are gone (those that cut a call's results to one stay);
//   - local variables are numbered in order of declaration, so their
//     names do not count;
//   - a local bound to KEYS[n] or ARGV[n] and never assigned is replaced
//     by that value (a script cannot change KEYS or ARGV and still match
//     a form of ours: none of them does);
//   - a local used once, first thing in the next statement, is replaced by
//     its value, which is then computed at the same moment as before;
//   - the command name of redis.call and redis.pcall, and SET and PEXPIRE
//     options, are in lower case, as Redis reads them in any case.
//
// Everything else counts: names are case-sensitive, as are other strings,
// and a text that is not Lua 5.1 has no form at all. The form is therefore
// only as good as the claim that each rewrite keeps meaning; TemplateForm
// checks the one claim that depends on the templates (where their option
// words stand). Form takes time linear in the script's length.
//
// Where things are: lex.go is Lua 5.1's lexer (llex.c), parse.go its
// grammar (lparser.c) into a syntax tree, and form.go resolves names to
// locals, decides which locals stand for their values, and prints the form.
package luaform
