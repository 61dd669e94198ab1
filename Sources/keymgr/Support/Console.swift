import Foundation
import KeyManager

/// Where keymgr's output goes: a command's answer on stdout, everything said to a person on stderr.
///
/// With `--json` stdout carries exactly one JSON document; confirmations are dropped (the document is the
/// confirmation). `--quiet` drops confirmations and warnings; `--verbose` adds details on stderr.
struct Console {
    let json: Bool
    let quiet: Bool
    let verbose: Bool

    /// Writes a command's human answer (a table, a JWS, a verdict) to stdout.
    func answer(_ text: String) {
        StandardStream.output.write(text.hasSuffix("\n") ? text : text + "\n")
    }

    /// Writes one JSON document to stdout: sorted keys, no whitespace, one line.
    func answer(json value: JSONValue) {
        StandardStream.output.write(value.canonicalJSON() + "\n")
    }

    /// A one-line report of what was done, on stderr; not with `--json` or `--quiet`.
    func confirm(_ text: String) {
        guard !json, !quiet else { return }
        StandardStream.error.write(text + "\n")
    }

    /// Something a person should know that is not an error, on stderr; not with `--quiet`.
    func warn(_ text: String) {
        guard !quiet else { return }
        StandardStream.error.write("keymgr: warning: \(text)\n")
    }

    /// What keymgr is doing, on stderr; only with `--verbose`.
    func detail(_ text: String) {
        guard verbose else { return }
        StandardStream.error.write("keymgr: \(text)\n")
    }

    /// Prints rows under headers with aligned columns on stdout; says so on stderr when there are no rows.
    func table(_ headers: [String], _ rows: [[String]], empty: String) {
        guard !rows.isEmpty else {
            if !quiet { StandardStream.error.write("\(empty)\n") }
            return
        }
        answer(TextTable(headers: headers, rows: rows).rendered)
    }
}

/// Columns padded to their widest cell (counted in characters), two spaces apart, no trailing blanks.
struct TextTable {
    let headers: [String]
    let rows: [[String]]

    var rendered: String {
        var widths = headers.map(\.count)
        for row in rows {
            for (index, cell) in row.enumerated() where index < widths.count {
                widths[index] = max(widths[index], TextTable.printable(cell).count)
            }
        }
        var out = ""
        for row in [headers] + rows {
            var line = ""
            for (index, cell) in row.enumerated() where index < widths.count {
                let text = TextTable.printable(cell)
                line += index == row.count - 1 ? text : text + String(repeating: " ", count: widths[index] - text.count + 2)
            }
            while line.hasSuffix(" ") { line.removeLast() }
            out += line + "\n"
        }
        return out
    }

    /// Control characters (a newline in a user id) would break the columns: show them escaped.
    static func printable(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if scalar.properties.generalCategory == .control {
                out += scalar.escaped(asASCII: true)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}

/// stdout or stderr, written with write(2) so nothing waits in a buffer when the process exits.
struct StandardStream {
    let descriptor: Int32

    static let output = StandardStream(descriptor: STDOUT_FILENO)
    static let error = StandardStream(descriptor: STDERR_FILENO)

    func write(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { buffer in
                Foundation.write(descriptor, buffer.baseAddress.map { $0 + offset }, buffer.count - offset)
            }
            if written < 0 {
                if errno == EINTR { continue }
                return  // The reader went away (EPIPE) or the stream is closed: nothing more to say.
            }
            offset += written
        }
        bytes.removeAll()
    }
}
