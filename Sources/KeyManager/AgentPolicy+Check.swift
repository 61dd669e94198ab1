/// The mistakes found in a policy's tables and keys, each on the line `PolicyTOMLLines` gives its path. TOMLKit
/// hands tables over sorted by key, not in the file's order, so every mistake is collected and the first one in the
/// file is the one reported: the same as reading the file from the top.
struct PolicyCheck {
    let file: String
    let lines: PolicyTOMLLines
    private var problems: [(order: Int, line: Int, message: String)] = []

    init(file: String, lines: PolicyTOMLLines) {
        self.file = file
        self.lines = lines
    }

    var count: Int { problems.count }

    /// A mistake at `path`. `after`: a mistake of the whole table at that path (a key it lacks), which comes after
    /// every line inside the table.
    mutating func fail(_ message: String, at path: [String], after: [String]? = nil) {
        let line = lines.line(of: path)
        let order = after.map { lines.lastLine(under: $0) * 2 + 1 } ?? line * 2
        problems.append((order, line, message))
    }

    /// `value` as a list of strings: a string is a list of one. Anything else is a mistake (nil).
    mutating func strings(_ value: PolicyTOML.Value, key: String, at path: [String]) -> [String]? {
        switch value {
        case .string(let string):
            return [string]
        case .array(let elements):
            var list: [String] = []
            for element in elements {
                switch element {
                case .string(let string):
                    list.append(string)
                case .array:
                    fail("nested arrays are not accepted: \(key) is one array of strings", at: path)
                    return nil
                default:
                    fail("the array of \(key) holds strings only, not \(element.kind): write each element in double quotes (\"…\")", at: path)
                    return nil
                }
            }
            return list
        case .table:
            fail("\(key) takes a string or an array of strings, not a table (inline tables {…}, dotted keys \(key).… "
                + "and [headers] under it are not accepted): e.g. \(key) = [\"…\"]", at: path)
            return nil
        default:
            fail("\(key) must be a string in double quotes or an array of them (numbers, booleans and dates are not "
                + "accepted): e.g. \(key) = [\"…\"]", at: path)
            return nil
        }
    }

    /// Throws the first mistake in the file's order, if any: `config`, `FILE:LINE: what to do`.
    func throwFirst() throws {
        guard let first = problems.enumerated().min(by: { ($0.element.order, $0.offset) < ($1.element.order, $1.offset) }) else {
            return
        }
        throw KeyManagerError(.config, "\(file):\(first.element.line): \(first.element.message)")
    }
}
