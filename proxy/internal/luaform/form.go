package luaform

import (
	"fmt"
	"strconv"
	"strings"
)

// Form returns the canonical form of src, or an error saying why it has
// none: it is not Lua 5.1, or goes beyond this package's limits.
func Form(src []byte) (form string, err error) {
	return formOf(src, false)
}

// TemplateForm is Form for a script that others are compared with: it
// also fails when an option word ("nx", "px", "get", ...) stands where
// Redis would not read it as an option, since Form lower-cases those words
// only as options and another script could then match with a different
// string there.
func TemplateForm(src string) (string, error) {
	return formOf([]byte(src), true)
}

func formOf(src []byte, template bool) (form string, err error) {
	defer func() {
		switch e := recover().(type) {
		case nil:
		case *lexError:
			err = fmt.Errorf("luaform: %s", e.msg)
		case *syntaxError:
			err = fmt.Errorf("luaform: %s", e.msg)
		default:
			panic(e)
		}
	}()
	b := parse(src)
	r := &resolver{}
	r.block(b)
	decideInlining(r.blocks)
	p := &printer{template: template}
	p.block(b)
	if p.err != nil {
		return "", p.err
	}
	return p.out.String(), nil
}

// resolver binds every name to its local, following Lua's scopes, and
// lists the blocks it went through.
type resolver struct {
	scopes [][]*binding
	blocks []*block
}

func (r *resolver) open()  { r.scopes = append(r.scopes, nil) }
func (r *resolver) close() { r.scopes = r.scopes[:len(r.scopes)-1] }

func (r *resolver) declare(bs ...*binding) {
	top := len(r.scopes) - 1
	r.scopes[top] = append(r.scopes[top], bs...)
}

func (r *resolver) lookup(name string) *binding {
	for i := len(r.scopes) - 1; i >= 0; i-- {
		s := r.scopes[i]
		for j := len(s) - 1; j >= 0; j-- {
			if s[j].name == name {
				return s[j]
			}
		}
	}
	return nil
}

func (r *resolver) block(b *block) {
	r.open()
	r.stmts(b)
	r.close()
}

// stmts resolves b's statements in the current scope (repeat's condition
// sees its body's locals).
func (r *resolver) stmts(b *block) {
	r.blocks = append(r.blocks, b)
	for _, s := range b.stmts {
		r.stmt(s)
	}
}

func (r *resolver) stmt(s stmt) {
	switch s := s.(type) {
	case *localStmt:
		r.exprs(s.exprs) // before the names are in scope: local x = x
		r.declare(s.names...)
	case *localFuncStmt:
		r.declare(s.name) // in scope in its own body
		r.function(s.fn)
	case *assignStmt:
		for _, t := range s.targets {
			if n, ok := t.(*nameExpr); ok {
				if n.local = r.lookup(n.name); n.local != nil {
					n.local.assigned = true
				}
				continue
			}
			r.expr(t)
		}
		r.exprs(s.exprs)
	case *callStmt:
		r.expr(s.call)
	case *doStmt:
		r.block(s.body)
	case *whileStmt:
		r.expr(s.cond)
		r.block(s.body)
	case *repeatStmt:
		r.open()
		r.stmts(s.body)
		r.expr(s.cond)
		r.close()
	case *ifStmt:
		for i, c := range s.conds {
			r.expr(c)
			r.block(s.blocks[i])
		}
		if s.els != nil {
			r.block(s.els)
		}
	case *numForStmt:
		r.expr(s.start)
		r.expr(s.limit)
		if s.step != nil {
			r.expr(s.step)
		}
		r.open()
		r.declare(s.v)
		r.block(s.body)
		r.close()
	case *genForStmt:
		r.exprs(s.exprs)
		r.open()
		r.declare(s.names...)
		r.block(s.body)
		r.close()
	case *funcStmt:
		// function a.b() reads a; function a() assigns it.
		if s.local = r.lookup(s.path[0]); s.local != nil {
			if len(s.path) == 1 && s.method == "" {
				s.local.assigned = true
			} else {
				s.local.uses++
			}
		}
		r.function(s.fn)
	case *returnStmt:
		r.exprs(s.exprs)
	}
}

func (r *resolver) function(fn *function) {
	r.open()
	r.declare(fn.params...)
	r.block(fn.body)
	r.close()
}

func (r *resolver) exprs(es []expr) {
	for _, e := range es {
		r.expr(e)
	}
}

func (r *resolver) expr(e expr) {
	switch e := e.(type) {
	case *nameExpr:
		if e.local = r.lookup(e.name); e.local != nil {
			e.local.uses++
		}
	case *funcExpr:
		r.function(e.fn)
	case *parenExpr:
		r.expr(e.e)
	case *unopExpr:
		r.expr(e.e)
	case *binopExpr:
		r.expr(e.l)
		r.expr(e.r)
	case *indexExpr:
		r.expr(e.obj)
		r.expr(e.key)
	case *callExpr:
		r.expr(e.fn)
		r.exprs(e.args)
	case *methodExpr:
		r.expr(e.obj)
		r.exprs(e.args)
	case *tableExpr:
		for _, f := range e.fields {
			if f.key != nil {
				r.expr(f.key)
			}
			r.expr(f.value)
		}
	}
}

// decideInlining marks the locals that the form replaces by their values,
// in every block.
func decideInlining(blocks []*block) {
	for _, b := range blocks {
		// Locals bound to KEYS[n] or ARGV[n] first: they are not
		// statements that anything happens in, so the "next statement"
		// of another local skips them.
		for _, s := range b.stmts {
			if l, v := singleLocal(s); l != nil && isArgument(v) {
				l.inline = v
			}
		}
		for i, s := range b.stmts {
			l, v := singleLocal(s)
			if l == nil || l.inline != nil || l.uses != 1 {
				continue
			}
			next := nextStatement(b.stmts, i)
			if next == nil {
				continue
			}
			if n, ok := firstEvaluated(next).(*nameExpr); ok && n.local == l {
				l.inline = truncated(v)
			}
		}
	}
}

// singleLocal returns the local and value of "local x = v" when x is never
// assigned afterwards.
func singleLocal(s stmt) (*binding, expr) {
	l, ok := s.(*localStmt)
	if !ok || len(l.names) != 1 || len(l.exprs) != 1 || l.names[0].assigned {
		return nil, nil
	}
	return l.names[0], l.exprs[0]
}

// nextStatement returns the statement after stmts[i] that does something.
func nextStatement(stmts []stmt, i int) stmt {
	for _, s := range stmts[i+1:] {
		if l, _ := singleLocal(s); l != nil && l.inline != nil {
			continue
		}
		return s
	}
	return nil
}

// isArgument reports whether e is KEYS[n] or ARGV[n] of the globals, n a
// number written in the script.
func isArgument(e expr) bool {
	ix, ok := e.(*indexExpr)
	if !ok {
		return false
	}
	n, ok := ix.obj.(*nameExpr)
	_, num := ix.key.(*numExpr)
	return ok && num && n.local == nil && (n.name == "KEYS" || n.name == "ARGV")
}

// firstEvaluated returns the expression a statement evaluates before
// anything else, where that is fixed by the language: an if's condition,
// the first value of a return or local, the function of a call.
func firstEvaluated(s stmt) expr {
	var e expr
	switch s := s.(type) {
	case *ifStmt:
		e = s.conds[0]
	case *returnStmt:
		if len(s.exprs) > 0 {
			e = s.exprs[0]
		}
	case *localStmt:
		if len(s.exprs) > 0 {
			e = s.exprs[0]
		}
	case *callStmt:
		e = s.call
	}
	for {
		switch x := e.(type) {
		case *parenExpr:
			e = x.e
		case *unopExpr:
			e = x.e
		case *binopExpr:
			e = x.l // evaluated first, and always: also for and/or
		case *indexExpr:
			e = x.obj
		case *callExpr:
			e = x.fn
		case *methodExpr:
			e = x.obj
		default:
			return e
		}
	}
}

// truncated is e as one value: a local holds the first of a call's results.
func truncated(e expr) expr {
	if multiValued(e) {
		return &parenExpr{e: e}
	}
	return e
}

func multiValued(e expr) bool {
	switch e.(type) {
	case *callExpr, *methodExpr:
		return true
	}
	return false
}

// optionWords are the options of SET and PEXPIRE/EXPIRE, which Redis
// reads in any case.
var optionWords = map[string]bool{
	"nx": true, "xx": true, "px": true, "ex": true, "pxat": true, "exat": true,
	"keepttl": true, "get": true, "gt": true, "lt": true,
}

// optionCommands are the commands whose options the form lower-cases.
var optionCommands = map[string]bool{"set": true, "pexpire": true, "expire": true}

type printer struct {
	out      strings.Builder
	ids      int
	template bool
	err      error
}

func (p *printer) w(s ...string) {
	for _, x := range s {
		p.out.WriteString(x)
	}
}

func (p *printer) block(b *block) {
	p.w("{")
	p.stmts(b)
	p.w("}")
}

func (p *printer) stmts(b *block) {
	for _, s := range b.stmts {
		if l, _ := singleLocal(s); l != nil && l.inline != nil {
			continue
		}
		p.stmt(s)
		p.w(";")
	}
}

func (p *printer) declare(bs []*binding) {
	for i, b := range bs {
		if i > 0 {
			p.w(",")
		}
		p.ids++
		b.id = p.ids
		p.w("$", strconv.Itoa(b.id))
	}
}

func (p *printer) stmt(s stmt) {
	switch s := s.(type) {
	case *localStmt:
		// The values first: they are evaluated before the names exist.
		p.w("local(")
		p.exprs(s.exprs, true)
		p.w("=>")
		p.declare(s.names)
		p.w(")")
	case *localFuncStmt:
		p.w("localfunction(")
		p.declare([]*binding{s.name})
		p.function(s.fn)
		p.w(")")
	case *assignStmt:
		p.w("assign(")
		p.exprs(s.targets, false)
		p.w("=")
		p.exprs(s.exprs, true)
		p.w(")")
	case *callStmt:
		p.w("do(")
		p.expr(s.call, false)
		p.w(")")
	case *doStmt:
		p.w("block")
		p.block(s.body)
	case *whileStmt:
		p.w("while(")
		p.expr(s.cond, false)
		p.w(")")
		p.block(s.body)
	case *repeatStmt:
		// The condition sees the body's locals, so it is printed inside.
		p.w("repeat{")
		p.stmts(s.body)
		p.w("until(")
		p.expr(s.cond, false)
		p.w(")}")
	case *ifStmt:
		for i, c := range s.conds {
			if i > 0 {
				p.w("else")
			}
			p.w("if(")
			p.expr(c, false)
			p.w(")")
			p.block(s.blocks[i])
		}
		if s.els != nil {
			p.w("else")
			p.block(s.els)
		}
		p.w("end")
	case *numForStmt:
		p.w("for(")
		p.expr(s.start, false)
		p.w(",")
		p.expr(s.limit, false)
		if s.step != nil {
			p.w(",")
			p.expr(s.step, false)
		}
		p.w("=>")
		p.declare([]*binding{s.v})
		p.w(")")
		p.block(s.body)
	case *genForStmt:
		p.w("forin(")
		p.exprs(s.exprs, true)
		p.w("=>")
		p.declare(s.names)
		p.w(")")
		p.block(s.body)
	case *funcStmt:
		p.w("function(")
		p.name(&nameExpr{name: s.path[0], local: s.local})
		for _, f := range s.path[1:] {
			p.w(".", strconv.Quote(f))
		}
		if s.method != "" {
			p.w(":", strconv.Quote(s.method))
		}
		p.function(s.fn)
		p.w(")")
	case *returnStmt:
		p.w("return(")
		p.exprs(s.exprs, true)
		p.w(")")
	case *breakStmt:
		p.w("break")
	}
}

func (p *printer) function(fn *function) {
	p.w("function(")
	p.declare(fn.params)
	p.w(")")
	p.block(fn.body)
}

// exprs prints a list; the last value of a list that keeps every result
// (arguments, return values, table items) is printed as such.
func (p *printer) exprs(es []expr, keepsAll bool) {
	for i, e := range es {
		if i > 0 {
			p.w(",")
		}
		p.expr(e, keepsAll && i == len(es)-1)
	}
}

// core is e without the parentheses around it and with its local
// replaced by the value it stands for.
func core(e expr) expr {
	for {
		switch x := e.(type) {
		case *parenExpr:
			e = x.e
		case *nameExpr:
			if x.local == nil || x.local.inline == nil {
				return e
			}
			e = x.local.inline
		default:
			return e
		}
	}
}

// expr prints e. multi says whether all of e's results are used there;
// elsewhere a call gives one value with or without parentheses.
func (p *printer) expr(e expr, multi bool) {
	if _, cut := e.(*parenExpr); cut || isInlined(e) {
		truncates := hasParen(e)
		e = core(e)
		if multi && truncates && multiValued(e) {
			p.w("first(")
			p.expr(e, false)
			p.w(")")
			return
		}
	}
	switch e := e.(type) {
	case *nilExpr:
		p.w("nil")
	case *boolExpr:
		p.w(strconv.FormatBool(e.v))
	case *numExpr:
		p.w(strconv.FormatFloat(e.v, 'g', -1, 64))
	case *strExpr:
		if p.template && optionWords[strings.ToLower(e.v)] && p.err == nil {
			p.err = fmt.Errorf("luaform: template has the option word %q where Redis would not read it as an option", e.v)
		}
		p.w(strconv.Quote(e.v))
	case *funcExpr:
		p.function(e.fn)
	case *unopExpr:
		p.w("(", e.op, " ")
		p.expr(e.e, false)
		p.w(")")
	case *binopExpr:
		p.w("(")
		p.expr(e.l, false)
		p.w(" ", e.op, " ")
		p.expr(e.r, false)
		p.w(")")
	case *nameExpr:
		p.name(e)
	case *indexExpr:
		p.expr(e.obj, false)
		p.w("[")
		p.expr(e.key, false)
		p.w("]")
	case *callExpr:
		p.expr(e.fn, false)
		p.w("(")
		if command, ok := redisCall(e); ok {
			p.commandArgs(command, e.args)
		} else {
			p.exprs(e.args, true)
		}
		p.w(")")
	case *methodExpr:
		p.expr(e.obj, false)
		p.w(":", strconv.Quote(e.name), "(")
		p.exprs(e.args, true)
		p.w(")")
	case *tableExpr:
		p.w("{")
		for i, f := range e.fields {
			if i > 0 {
				p.w(",")
			}
			if f.key != nil {
				p.w("[")
				p.expr(f.key, false)
				p.w("]=")
			}
			p.expr(f.value, f.key == nil && i == len(e.fields)-1)
		}
		p.w("}")
	}
}

func isInlined(e expr) bool {
	n, ok := e.(*nameExpr)
	return ok && n.local != nil && n.local.inline != nil
}

// hasParen reports whether e, through parentheses and inlined locals, is
// parenthesised somewhere: then it gives one value.
func hasParen(e expr) bool {
	for {
		switch x := e.(type) {
		case *parenExpr:
			return true
		case *nameExpr:
			if x.local == nil || x.local.inline == nil {
				return false
			}
			e = x.local.inline
		default:
			return false
		}
	}
}

func (p *printer) name(n *nameExpr) {
	if n.local == nil {
		p.w("G.", n.name)
		return
	}
	p.w("$", strconv.Itoa(n.local.id))
}

// redisCall returns the command of redis.call(command, ...) or
// redis.pcall, lower-cased, when it is written as a string.
func redisCall(c *callExpr) (string, bool) {
	ix, ok := c.fn.(*indexExpr)
	if !ok || len(c.args) == 0 {
		return "", false
	}
	obj, isName := core(ix.obj).(*nameExpr)
	field, isStr := core(ix.key).(*strExpr)
	command, isCommand := core(c.args[0]).(*strExpr)
	if !isName || obj.local != nil || obj.name != "redis" || !isStr ||
		field.v != "call" && field.v != "pcall" || !isCommand {
		return "", false
	}
	return strings.ToLower(command.v), true
}

// commandArgs prints the arguments of a Redis command: its name and its
// options in lower case.
func (p *printer) commandArgs(command string, args []expr) {
	p.w(strconv.Quote(command))
	for i, a := range args[1:] {
		p.w(",")
		s, isStr := core(a).(*strExpr)
		if i+1 >= 3 && isStr && optionCommands[command] && optionWords[strings.ToLower(s.v)] {
			p.w(strconv.Quote(strings.ToLower(s.v)))
			continue
		}
		p.expr(a, i+1 == len(args)-1)
	}
}
