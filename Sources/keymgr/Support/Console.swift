import AgentWire
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
    /// The request's stdout and stderr.
    let streams: StandardStreams
    /// The request's `COLUMNS`, if any: the width tables fit (`TableWidth`).
    var columns: String?

    /// The console's stdout (`answer`) and stderr (everything said to a person).
    var output: StandardStream { streams.output }
    var error: StandardStream { streams.error }

    /// How many terminal columns a table may take on this console's stdout (`TableWidth`).
    var tableWidth: Int { TableWidth.of(columns: columns, output: streams.output.descriptor) }

    /// Writes a command's human answer (a table, a JWS, a verdict) to stdout.
    func answer(_ text: String) {
        streams.output.write(text.hasSuffix("\n") ? text : text + "\n")
    }

    /// Writes one JSON document to stdout: sorted keys, no whitespace, one line, ISO 8601 UTC timestamps.
    func answer(json value: some Encodable) {
        streams.output.write(Self.encoded(value) + "\n")
    }

    /// The one JSON encoding of keymgr's output.
    static func encoded(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(ISOTime.string(from: date))
        }
        // The output types hold strings, numbers, dates and JSON values: nothing an encoder can refuse.
        guard let data = try? encoder.encode(value) else { return "null" }
        return escapingInvisibles(String(decoding: data, as: UTF8.self))
    }

    /// JSON with DEL, C1 controls and bidi controls written as `\uXXXX` (the encoder escapes only C0): the same
    /// values for a JSON reader, but nothing a server sent can move the cursor or reorder text on a terminal.
    static func escapingInvisibles(_ json: String) -> String {
        let unsafe = { (value: UInt32) in value >= 0x20 && PrintableText.isInvisible(value) }
        guard json.unicodeScalars.contains(where: { unsafe($0.value) }) else { return json }
        var out = String.UnicodeScalarView()
        for scalar in json.unicodeScalars {
            if unsafe(scalar.value) {
                out.append(contentsOf: String(format: "\\u%04x", scalar.value).unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    /// A one-line report of what was done, on stderr; not with `--json` or `--quiet`.
    func confirm(_ text: String) {
        guard !json, !quiet else { return }
        streams.error.write(PrintableText.stripped(text) + "\n")
    }

    /// Something a person should know that is not an error, on stderr; not with `--quiet`.
    func warn(_ text: String) {
        guard !quiet else { return }
        streams.error.write("keymgr: warning: \(PrintableText.stripped(text))\n")
    }

    /// What keymgr is doing, on stderr; only with `--verbose`.
    func detail(_ text: String) {
        guard verbose else { return }
        streams.error.write("keymgr: \(text)\n")
    }

    /// Prints rows under `columns` on stdout, fitted to `tableWidth` columns (the width rule in
    /// `TextTable`) unless `wide`. Says `empty` on stderr when there are no rows.
    func table(_ columns: [TableColumn], _ rows: [[String]], empty: String, wide: Bool = false) {
        guard !rows.isEmpty else {
            if !quiet { streams.error.write("\(empty)\n") }
            return
        }
        let table = TextTable(columns, sample: rows, maxWidth: wide ? nil : tableWidth)
        answer(table.header + rows.map(table.line).joined())
    }
}

/// A request's stdout or stderr (or a terminal's descriptor), written with write(2) so nothing waits in a buffer when
/// the process exits.
struct StandardStream: TextOutputStream, Sendable {
    let descriptor: Int32

    func write(_ text: String) {
        write(bytes: Array(text.utf8))
    }

    func write(bytes: [UInt8]) {
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
    }
}
