package luaform

import "fmt"

// The parser follows Lua 5.1.5's lparser.c: the same grammar, operator
// priorities and checks (an assignment's targets, "break" outside a loop,
// a call's "(" on a new line). It takes less than Lua does where taking it
// would need more care than lock scripts are worth: "..." and limits far
// below Lua's own (syntax depth, locals), which a lock script never nears.

const (
	// maxDepth bounds nested blocks and expressions; Lua's limit is 200
	// C levels (LUAI_MAXCCALLS), of which each of ours costs one or two.
	maxDepth = 60
	// maxLocals bounds the local variables of a whole script, below the
	// 60 upvalues and 200 locals that Lua allows a function.
	maxLocals = 50
)

type expr interface{}

type (
	nilExpr   struct{}
	boolExpr  struct{ v bool }
	numExpr   struct{ v float64 }
	strExpr   struct{ v string }
	funcExpr  struct{ fn *function }
	parenExpr struct{ e expr }
	unopExpr  struct {
		op string
		e  expr
	}
	binopExpr struct {
		op   string
		l, r expr
	}
	// nameExpr is a name as written; resolve binds it to a local or
	// leaves it global.
	nameExpr struct {
		name  string
		local *binding
	}
	indexExpr struct{ obj, key expr }
	callExpr  struct {
		fn   expr
		args []expr
	}
	methodExpr struct {
		obj  expr
		name string
		args []expr
	}
	tableExpr struct{ fields []field }
)

// field is one entry of a table constructor: key is nil for a positional one.
type field struct{ key, value expr }

type function struct {
	params []*binding
	body   *block
}

type stmt interface{}

type (
	localStmt struct {
		names []*binding
		exprs []expr
	}
	localFuncStmt struct {
		name *binding
		fn   *function
	}
	assignStmt struct{ targets, exprs []expr }
	callStmt   struct{ call expr }
	doStmt     struct{ body *block }
	whileStmt  struct {
		cond expr
		body *block
	}
	repeatStmt struct {
		body *block
		cond expr
	}
	ifStmt struct {
		conds  []expr
		blocks []*block
		els    *block // nil without else
	}
	numForStmt struct {
		v                  *binding
		start, limit, step expr // step nil when not written
		body               *block
	}
	genForStmt struct {
		names []*binding
		exprs []expr
		body  *block
	}
	funcStmt struct {
		path   []string // function a.b.c
		method string   // :m, or ""
		fn     *function
		local  *binding // what path[0] names, when a local
	}
	returnStmt struct{ exprs []expr }
	breakStmt  struct{}
)

type block struct{ stmts []stmt }

// binding is one local variable (or parameter, or loop variable).
type binding struct {
	name     string
	uses     int  // references, as values
	assigned bool // ever the target of an assignment
	// inline, when set, is the expression every reference stands for
	// (form.go), and the declaration is not printed.
	inline expr
	id     int // its number in the form, 1 up, in order of declaration
}

type parser struct {
	lex       lexer
	tok, prev token
	ahead     *token
	depth     int
	loops     int // enclosing loops of the current function
	locals    int
}

type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return e.msg }

func (p *parser) fail(format string, args ...any) {
	panic(&syntaxError{fmt.Sprintf("line %d: ", p.tok.line) + fmt.Sprintf(format, args...)})
}

func (p *parser) advance() {
	p.prev = p.tok
	if p.ahead != nil {
		p.tok, p.ahead = *p.ahead, nil
		return
	}
	p.tok = p.lex.next()
}

func (p *parser) peek() token {
	if p.ahead == nil {
		t := p.lex.next()
		p.ahead = &t
	}
	return *p.ahead
}

func (p *parser) is(text string) bool {
	return (p.tok.kind == tokSymbol || p.tok.kind == tokKeyword) && p.tok.text == text
}

func (p *parser) accept(text string) bool {
	if p.is(text) {
		p.advance()
		return true
	}
	return false
}

func (p *parser) expect(text string) {
	if !p.accept(text) {
		p.fail("%q expected", text)
	}
}

func (p *parser) name() string {
	if p.tok.kind != tokName {
		p.fail("name expected")
	}
	n := p.tok.text
	p.advance()
	return n
}

func (p *parser) enter() {
	if p.depth++; p.depth > maxDepth {
		p.fail("nested more than %d levels deep", maxDepth)
	}
}

func (p *parser) leave() { p.depth-- }

func (p *parser) newLocal(name string) *binding {
	if p.locals++; p.locals > maxLocals {
		p.fail("more than %d local variables", maxLocals)
	}
	return &binding{name: name}
}

// parse reads a whole chunk.
func parse(src []byte) *block {
	p := &parser{lex: lexer{src: src, line: 1}}
	p.advance()
	b := p.block()
	if p.tok.kind != tokEOF {
		p.fail("'<eof>' expected")
	}
	return b
}

// blockFollow reports whether the token ends a block.
func (p *parser) blockFollow() bool {
	return p.tok.kind == tokEOF || p.is("else") || p.is("elseif") || p.is("end") || p.is("until")
}

// block is Lua's chunk: { stat [';'] } [ laststat [';'] ].
func (p *parser) block() *block {
	p.enter()
	defer p.leave()
	b := &block{}
	for !p.blockFollow() {
		s, last := p.statement()
		b.stmts = append(b.stmts, s)
		p.accept(";")
		if last {
			break
		}
	}
	return b
}

func (p *parser) statement() (s stmt, last bool) {
	switch {
	case p.is("if"):
		return p.ifStmt(), false
	case p.is("while"):
		p.advance()
		cond := p.expr()
		p.expect("do")
		body := p.loopBody()
		p.expect("end")
		return &whileStmt{cond: cond, body: body}, false
	case p.is("do"):
		p.advance()
		body := p.block()
		p.expect("end")
		return &doStmt{body: body}, false
	case p.is("for"):
		return p.forStmt(), false
	case p.is("repeat"):
		p.advance()
		body := p.loopBody()
		p.expect("until")
		return &repeatStmt{body: body, cond: p.expr()}, false
	case p.is("function"):
		p.advance()
		s := &funcStmt{path: []string{p.name()}}
		for p.accept(".") {
			s.path = append(s.path, p.name())
		}
		if p.accept(":") {
			s.method = p.name()
		}
		s.fn = p.funcBody(s.method != "")
		return s, false
	case p.is("local"):
		p.advance()
		if p.accept("function") {
			s := &localFuncStmt{name: p.newLocal(p.name())}
			s.fn = p.funcBody(false)
			return s, false
		}
		s := &localStmt{}
		for {
			s.names = append(s.names, p.newLocal(p.name()))
			if !p.accept(",") {
				break
			}
		}
		if p.accept("=") {
			s.exprs = p.exprList()
		}
		return s, false
	case p.is("return"):
		p.advance()
		s := &returnStmt{}
		if !p.blockFollow() && !p.is(";") {
			s.exprs = p.exprList()
		}
		return s, true
	case p.is("break"):
		if p.loops == 0 {
			p.fail("no loop to break")
		}
		p.advance()
		return &breakStmt{}, true
	}
	return p.exprStmt(), false
}

func (p *parser) loopBody() *block {
	p.loops++
	defer func() { p.loops-- }()
	return p.block()
}

func (p *parser) ifStmt() stmt {
	s := &ifStmt{}
	for p.is("if") && len(s.conds) == 0 || p.is("elseif") {
		p.advance()
		s.conds = append(s.conds, p.expr())
		p.expect("then")
		s.blocks = append(s.blocks, p.block())
	}
	if p.accept("else") {
		s.els = p.block()
	}
	p.expect("end")
	return s
}

func (p *parser) forStmt() stmt {
	p.advance()
	first := p.name()
	if p.accept("=") {
		s := &numForStmt{v: p.newLocal(first)}
		s.start = p.expr()
		p.expect(",")
		s.limit = p.expr()
		if p.accept(",") {
			s.step = p.expr()
		}
		p.expect("do")
		s.body = p.loopBody()
		p.expect("end")
		return s
	}
	s := &genForStmt{names: []*binding{p.newLocal(first)}}
	for p.accept(",") {
		s.names = append(s.names, p.newLocal(p.name()))
	}
	p.expect("in")
	s.exprs = p.exprList()
	p.expect("do")
	s.body = p.loopBody()
	p.expect("end")
	return s
}

// funcBody reads ( params ) block end; a method gets "self" first.
func (p *parser) funcBody(method bool) *function {
	fn := &function{}
	if method {
		fn.params = append(fn.params, p.newLocal("self"))
	}
	p.expect("(")
	if !p.is(")") {
		for {
			if p.is("...") {
				p.fail("varargs are not taken")
			}
			fn.params = append(fn.params, p.newLocal(p.name()))
			if !p.accept(",") {
				break
			}
		}
	}
	p.expect(")")
	loops := p.loops
	p.loops = 0 // a break inside a function needs a loop inside it
	fn.body = p.block()
	p.loops = loops
	p.expect("end")
	return fn
}

// exprStmt is a call, or an assignment to names and indexed values.
func (p *parser) exprStmt() stmt {
	e := p.primaryExpr()
	if _, ok := e.(*callExpr); ok {
		return &callStmt{call: e}
	}
	if _, ok := e.(*methodExpr); ok {
		return &callStmt{call: e}
	}
	s := &assignStmt{targets: []expr{e}}
	for p.accept(",") {
		s.targets = append(s.targets, p.primaryExpr())
	}
	for _, t := range s.targets {
		switch t.(type) {
		case *nameExpr, *indexExpr:
		default:
			p.fail("syntax error")
		}
	}
	p.expect("=")
	s.exprs = p.exprList()
	return s
}

func (p *parser) exprList() []expr {
	list := []expr{p.expr()}
	for p.accept(",") {
		list = append(list, p.expr())
	}
	return list
}

// priorities are lparser.c's left and right priorities of binary operators.
var priorities = map[string][2]int{
	"or": {1, 1}, "and": {2, 2},
	"<": {3, 3}, ">": {3, 3}, "<=": {3, 3}, ">=": {3, 3}, "~=": {3, 3}, "==": {3, 3},
	"..": {5, 4}, "+": {6, 6}, "-": {6, 6}, "*": {7, 7}, "/": {7, 7}, "%": {7, 7},
	"^": {10, 9},
}

const unaryPriority = 8

func (p *parser) binop() (string, bool) {
	if p.tok.kind != tokSymbol && p.tok.kind != tokKeyword {
		return "", false
	}
	_, ok := priorities[p.tok.text]
	return p.tok.text, ok
}

func (p *parser) expr() expr { return p.subExpr(0) }

// subExpr reads an expression whose binary operators bind tighter than
// limit (lparser.c's subexpr).
func (p *parser) subExpr(limit int) expr {
	p.enter()
	defer p.leave()
	var e expr
	if p.is("not") || p.is("-") || p.is("#") {
		op := p.tok.text
		p.advance()
		e = &unopExpr{op: op, e: p.subExpr(unaryPriority)}
	} else {
		e = p.simpleExpr()
	}
	for {
		op, ok := p.binop()
		if !ok || priorities[op][0] <= limit {
			return e
		}
		p.advance()
		e = &binopExpr{op: op, l: e, r: p.subExpr(priorities[op][1])}
	}
}

func (p *parser) simpleExpr() expr {
	t := p.tok
	switch {
	case t.kind == tokNumber:
		p.advance()
		return &numExpr{v: t.num}
	case t.kind == tokString:
		p.advance()
		return &strExpr{v: t.str}
	case p.is("nil"):
		p.advance()
		return &nilExpr{}
	case p.is("true"), p.is("false"):
		p.advance()
		return &boolExpr{v: t.text == "true"}
	case p.is("..."):
		p.fail("varargs are not taken")
	case p.is("{"):
		return p.table()
	case p.is("function"):
		p.advance()
		return &funcExpr{fn: p.funcBody(false)}
	}
	return p.primaryExpr()
}

// primaryExpr is a name or a parenthesised expression, then any fields,
// indices and calls.
func (p *parser) primaryExpr() expr {
	var e expr
	switch {
	case p.tok.kind == tokName:
		e = &nameExpr{name: p.name()}
	case p.is("("):
		p.advance()
		e = &parenExpr{e: p.expr()}
		p.expect(")")
	default:
		p.fail("unexpected symbol")
	}
	for {
		switch {
		case p.is("."):
			p.advance()
			e = &indexExpr{obj: e, key: &strExpr{v: p.name()}}
		case p.is("["):
			p.advance()
			e = &indexExpr{obj: e, key: p.expr()}
			p.expect("]")
		case p.is(":"):
			p.advance()
			name := p.name()
			e = &methodExpr{obj: e, name: name, args: p.callArgs()}
		case p.is("("), p.is("{"), p.tok.kind == tokString:
			e = &callExpr{fn: e, args: p.callArgs()}
		default:
			return e
		}
	}
}

func (p *parser) callArgs() []expr {
	switch {
	case p.tok.kind == tokString:
		s := &strExpr{v: p.tok.str}
		p.advance()
		return []expr{s}
	case p.is("{"):
		return []expr{p.table()}
	case p.is("("):
		// Lua 5.1 refuses "f\n(g)()": is it a call of f, or two statements?
		if p.tok.line != p.prev.endLine {
			p.fail("ambiguous syntax (function call x new statement)")
		}
		p.advance()
		var args []expr
		if !p.is(")") {
			args = p.exprList()
		}
		p.expect(")")
		return args
	}
	p.fail("function arguments expected")
	return nil
}

func (p *parser) table() expr {
	p.expect("{")
	t := &tableExpr{}
	for !p.is("}") {
		switch {
		case p.tok.kind == tokName && p.peek().kind == tokSymbol && p.peek().text == "=":
			key := &strExpr{v: p.name()}
			p.expect("=")
			t.fields = append(t.fields, field{key: key, value: p.expr()})
		case p.is("["):
			p.advance()
			key := p.expr()
			p.expect("]")
			p.expect("=")
			t.fields = append(t.fields, field{key: key, value: p.expr()})
		default:
			t.fields = append(t.fields, field{value: p.expr()})
		}
		if !p.accept(",") && !p.accept(";") {
			break
		}
	}
	p.expect("}")
	return t
}
