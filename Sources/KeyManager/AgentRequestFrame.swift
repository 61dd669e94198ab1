import Foundation

/// A request of the agent's socket protocol (version 1; docs/agent-protocol.md): a 4-byte big-endian length N
/// (1 ≤ N ≤ 65536) and N bytes of UTF-8 JSON, `{"version":1,"arguments":[…],"fds":[0,1,2],"terminal":false,
/// "columns":120}`. Unknown members are ignored.
///
/// The decoder is a pure function of the bytes (no descriptor, no clock), so the fuzz target can call it.
public struct AgentRequestFrame: Sendable, Equatable {
    /// The protocol version this agent speaks.
    public static let version = 1
    /// The largest JSON body a request may have.
    public static let maxBodyBytes = 65536
    /// The most descriptors a request may pass for the command (the terminal comes on top).
    public static let maxDescriptors = 8
    /// The highest descriptor number a passed descriptor may take in the command.
    public static let maxDescriptorNumber: Int32 = 255

    /// The command line, without the program name.
    public var arguments: [String]
    /// `fds[i]` is the number passed descriptor i takes in the command.
    public var fds: [Int32]
    /// Whether one more descriptor, the client's terminal, follows the `fds` ones.
    public var terminal: Bool
    /// The client's `COLUMNS`.
    public var columns: Int?

    public init(arguments: [String], fds: [Int32], terminal: Bool, columns: Int?) {
        self.arguments = arguments
        self.fds = fds
        self.terminal = terminal
        self.columns = columns
    }

    /// Why a request could not be read: the message goes back to the client.
    public struct Malformed: Error, Equatable, Sendable {
        public let message: String
        public init(_ message: String) { self.message = message }
    }

    /// The body length a frame's first four bytes announce, checked against the limit.
    public static func bodyLength(header: [UInt8]) throws -> Int {
        guard header.count == 4 else { throw Malformed("a request starts with a 4-byte length") }
        let length = header.reduce(0) { $0 << 8 | Int($1) }
        guard length >= 1 else { throw Malformed("the request is empty") }
        guard length <= maxBodyBytes else {
            throw Malformed("the request is \(length) bytes: at most \(maxBodyBytes) are accepted")
        }
        return length
    }

    /// Decodes one whole frame (length and body); `Malformed` for anything else.
    public static func decodeRequest(_ frame: [UInt8]) throws -> AgentRequestFrame {
        guard frame.count >= 4 else { throw Malformed("a request starts with a 4-byte length") }
        let length = try bodyLength(header: Array(frame.prefix(4)))
        guard frame.count == 4 + length else {
            throw Malformed("the request's length says \(length) bytes and \(frame.count - 4) came")
        }
        return try decodeBody(Array(frame[4...]))
    }

    /// Decodes a frame's JSON body.
    public static func decodeBody(_ body: [UInt8]) throws -> AgentRequestFrame {
        let wire: Wire
        do {
            wire = try JSONDecoder().decode(Wire.self, from: Data(body))
        } catch let error as Malformed {
            throw error
        } catch {
            throw Malformed("the request is not a JSON object of protocol version \(Self.version)")
        }
        guard let version = wire.version else {
            throw Malformed("the request has no version: this agent speaks version \(Self.version)")
        }
        guard version == Self.version else {
            throw Malformed("the request is version \(version): this agent speaks version \(Self.version)")
        }
        guard let arguments = wire.arguments else { throw Malformed("the request has no arguments (a list of strings)") }
        guard !arguments.contains(where: { $0.utf8.contains(0) }) else {
            throw Malformed("an argument contains a NUL character")
        }
        let fds = wire.fds ?? []
        guard fds.count <= maxDescriptors else {
            throw Malformed("at most \(maxDescriptors) descriptors may be passed, not \(fds.count)")
        }
        guard fds.allSatisfy({ (0...maxDescriptorNumber).contains($0) }) else {
            throw Malformed("fds must hold descriptor numbers from 0 to \(maxDescriptorNumber)")
        }
        guard Set(fds).count == fds.count else { throw Malformed("a descriptor number is given twice in fds") }
        if let columns = wire.columns, !(1...100_000).contains(columns) {
            throw Malformed("columns must be a positive number of terminal columns")
        }
        return AgentRequestFrame(arguments: arguments, fds: fds, terminal: wire.terminal ?? false, columns: wire.columns)
    }

    /// The members this version reads; JSONDecoder ignores the others and refuses a member of the wrong type.
    private struct Wire: Decodable {
        let version: Int?
        let arguments: [String]?
        let fds: [Int32]?
        let terminal: Bool?
        let columns: Int?
    }
}

/// The agent's answer: `{"status":N}`, or `{"status":N,"error":{"code","message"}}` when it could not run the command.
public enum AgentResponseFrame {
    /// The framed response (4-byte big-endian length, then the JSON).
    public static func encode(status: Int32, error: (code: String, message: String)? = nil) -> [UInt8] {
        var json = "{\"status\":\(status)"
        if let error {
            json += ",\"error\":{\"code\":\(quoted(error.code)),\"message\":\(quoted(error.message))}"
        }
        json += "}"
        let body = Array(json.utf8)
        let length = UInt32(body.count)
        return [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)] + body
    }

    private static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
