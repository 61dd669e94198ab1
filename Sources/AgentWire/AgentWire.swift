// The agent protocol, version 1 (docs/agent-protocol.md): one request frame from the client, one response frame
// from the agent. A frame is a 4-byte big-endian length N (1 ≤ N ≤ 65536) and N bytes of UTF-8 JSON.
//
// No Foundation: the lean client links this module, and its start-up is the point of being lean.

/// Framing constants and helpers shared by the client, the agent and the fuzz target.
public enum AgentWire {
    /// The protocol version this build speaks.
    public static let version = 1
    /// The largest JSON body of one frame, in bytes.
    public static let maximumFrameLength = 65536
    /// The most numbered descriptors (`fds`) a request may pass; the terminal, when passed, comes on top.
    public static let maximumDescriptors = 8
    /// The most files named by options (`files`) a request may pass, after the numbered descriptors and the terminal.
    public static let maximumNamedFiles = 4
    /// The highest number a passed descriptor may take in the command (the agent keeps its own above it).
    public static let maximumDescriptorNumber: Int32 = 255
    /// The widest `columns` accepted.
    public static let maximumColumns = 100_000
    /// How long the agent waits for a whole request after accepting a connection, in seconds.
    public static let requestDeadlineSeconds = 10

    /// `body` with its 4-byte big-endian length in front.
    public static func frame(_ body: [UInt8]) -> [UInt8] {
        let length = UInt32(truncatingIfNeeded: body.count)
        var bytes: [UInt8] = [
            UInt8(truncatingIfNeeded: length >> 24), UInt8(truncatingIfNeeded: length >> 16),
            UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length),
        ]
        bytes.reserveCapacity(4 + body.count)
        bytes.append(contentsOf: body)
        return bytes
    }

    /// The body length a frame's 4-byte header announces, checked against the protocol's limits.
    public static func bodyLength(header: some Collection<UInt8>) throws(AgentWireError) -> Int {
        guard header.count == 4 else { throw AgentWireError("a frame header is 4 bytes, not \(header.count)") }
        var length = 0
        for byte in header { length = length << 8 | Int(byte) }
        guard length >= 1 else { throw AgentWireError("an empty frame: a frame carries 1 to \(maximumFrameLength) bytes") }
        guard length <= maximumFrameLength else {
            throw AgentWireError("a frame of \(length) bytes is over the limit of \(maximumFrameLength)")
        }
        return length
    }
}

/// Why bytes are not a valid frame of the protocol. The message names the fault (never the frame's contents).
public struct AgentWireError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What is wrong, for a person reading the agent's error response.
    public let message: String
    /// True when the request named a version this build does not speak (the rest was not read).
    public let unsupportedVersion: Bool

    public init(_ message: String, unsupportedVersion: Bool = false) {
        self.message = message
        self.unsupportedVersion = unsupportedVersion
    }

    public var description: String { message }
}

/// What the client asks: a command line to run as the caller, with the caller's descriptors.
public struct AgentRequest: Equatable, Sendable {
    /// The command's arguments, without the program name (`["sign", "--user", "alice"]`).
    public var arguments: [String]
    /// The number each passed descriptor takes in the command, in the order they were passed: 0, 1, 2 always, plus
    /// the `--pin-fd`/`--password-fd` numbers the arguments name. At most `AgentWire.maximumDescriptors`, no repeats,
    /// each at most `AgentWire.maximumDescriptorNumber`.
    public var fds: [Int32]
    /// True when one more descriptor follows the `fds` ones: the client's controlling terminal, for prompts.
    public var terminal: Bool
    /// The client's `COLUMNS`, when it holds a number from 1 to `AgentWire.maximumColumns`.
    public var columns: Int?
    /// The files the arguments' options name, opened by the client with the caller's rights: one descriptor each,
    /// after the `fds` ones and the terminal, in this order. At most `AgentWire.maximumNamedFiles`, each option once.
    public var files: [NamedFileArgument]

    public init(arguments: [String], fds: [Int32] = [0, 1, 2], terminal: Bool = false, columns: Int? = nil,
                files: [NamedFileArgument] = []) {
        self.arguments = arguments
        self.fds = fds
        self.terminal = terminal
        self.columns = columns
        self.files = files
    }

    /// How many descriptors travel with the request.
    public var descriptorCount: Int { fds.count + (terminal ? 1 : 0) + files.count }

    /// The request's JSON body:
    /// `{"version":1,"arguments":[…],"fds":[…],"terminal":…[,"columns":N][,"files":[{"access","option","path"}…]]}`.
    public func encoded() -> [UInt8] {
        var writer = JSONWriter()
        writer.raw("{\"version\":\(AgentWire.version),\"arguments\":[")
        for (index, argument) in arguments.enumerated() {
            if index > 0 { writer.raw(",") }
            writer.string(argument)
        }
        writer.raw("],\"fds\":[")
        writer.raw(fds.map { String($0) }.joined(separator: ","))
        writer.raw("],\"terminal\":\(terminal)")
        if let columns { writer.raw(",\"columns\":\(columns)") }
        if !files.isEmpty {
            writer.raw(",\"files\":[")
            for (index, file) in files.enumerated() {
                writer.raw(index > 0 ? ",{\"access\":" : "{\"access\":")
                writer.string(file.access.rawValue)
                writer.raw(",\"option\":")
                writer.string(file.option)
                writer.raw(",\"path\":")
                writer.string(file.path)
                writer.raw("}")
            }
            writer.raw("]")
        }
        writer.raw("}")
        return writer.bytes
    }

    /// Reads a request body. Unknown members are ignored; everything else is checked: the version first (an
    /// unsupported one is reported as such), then each member's type and range. Throws on any fault.
    public static func decode(_ body: some Collection<UInt8>) throws(AgentWireError) -> AgentRequest {
        let members = try JSONReader.object(Array(body))
        guard let version = members["version"] else { throw AgentWireError("the request has no \"version\"") }
        guard case .integer(let number) = version else {
            throw AgentWireError("the request's \"version\" is not an integer")
        }
        guard number == AgentWire.version else {
            throw AgentWireError(
                "protocol version \(number) is not supported: this agent speaks version \(AgentWire.version)",
                unsupportedVersion: true)
        }
        guard case .array(let list)? = members["arguments"] else {
            throw AgentWireError("the request's \"arguments\" is missing or not an array of strings")
        }
        var arguments: [String] = []
        arguments.reserveCapacity(list.count)
        for item in list {
            guard case .string(let argument) = item else {
                throw AgentWireError("the request's \"arguments\" holds something other than a string")
            }
            guard !argument.utf8.contains(0) else {
                throw AgentWireError("an argument holds a NUL character, which no command line can")
            }
            arguments.append(argument)
        }
        guard case .array(let numbers)? = members["fds"] else {
            throw AgentWireError("the request's \"fds\" is missing or not an array of descriptor numbers")
        }
        guard numbers.count <= AgentWire.maximumDescriptors else {
            throw AgentWireError("the request passes \(numbers.count) descriptors: at most \(AgentWire.maximumDescriptors)")
        }
        var fds: [Int32] = []
        for item in numbers {
            guard case .integer(let fd) = item, fd >= 0, fd <= Int64(AgentWire.maximumDescriptorNumber) else {
                throw AgentWireError("the request's \"fds\" holds something other than a descriptor number from 0 to "
                    + "\(AgentWire.maximumDescriptorNumber)")
            }
            guard !fds.contains(Int32(fd)) else { throw AgentWireError("the request's \"fds\" names \(fd) twice") }
            fds.append(Int32(fd))
        }
        for standard: Int32 in [0, 1, 2] where !fds.contains(standard) {
            throw AgentWireError("the request's \"fds\" lacks \(standard): stdin, stdout and stderr are always passed")
        }
        var terminal = false
        if let value = members["terminal"] {
            guard case .boolean(let flag) = value else { throw AgentWireError("the request's \"terminal\" is not true or false") }
            terminal = flag
        }
        var columns: Int?
        if let value = members["columns"] {
            guard case .integer(let number) = value, number > 0, number <= Int64(AgentWire.maximumColumns) else {
                throw AgentWireError("the request's \"columns\" is not a number of columns from 1 to \(AgentWire.maximumColumns)")
            }
            columns = Int(number)
        }
        var files: [NamedFileArgument] = []
        if let value = members["files"] {
            guard case .array(let list) = value else { throw AgentWireError("the request's \"files\" is not an array") }
            guard list.count <= AgentWire.maximumNamedFiles else {
                throw AgentWireError("the request passes \(list.count) named files: at most \(AgentWire.maximumNamedFiles)")
            }
            for item in list {
                guard case .object(let file) = item, case .string(let option)? = file["option"],
                      case .string(let path)? = file["path"], case .string(let how)? = file["access"],
                      let access = NamedFileAccess(rawValue: how)
                else {
                    throw AgentWireError("the request's \"files\" holds something other than "
                        + "{\"access\":\"read\"|\"create\",\"option\":…,\"path\":…}")
                }
                guard option.hasPrefix("--"), option.count > 2, !path.isEmpty, !path.utf8.contains(0) else {
                    throw AgentWireError("a named file of the request has no --option, or a path that is empty or holds a NUL")
                }
                guard !files.contains(where: { $0.option == option }) else {
                    throw AgentWireError("the request's \"files\" names \(option) twice")
                }
                files.append(NamedFileArgument(option: option, path: path, access: access))
            }
        }
        return AgentRequest(arguments: arguments, fds: fds, terminal: terminal, columns: columns, files: files)
    }
}

/// What the agent answers: the command's exit status, or why it could not run the command.
public struct AgentResponse: Equatable, Sendable {
    /// Why the agent could not run the command: a CLI error code (`usage`, `busy`, `denied`, …) and a message.
    public struct Failure: Equatable, Sendable {
        public var code: String
        public var message: String

        public init(code: String, message: String) {
            self.code = code
            self.message = message
        }
    }

    /// The exit status the client exits with, 0…255.
    public var status: Int32
    /// Present when the agent did not run the command (the client then reports it).
    public var error: Failure?

    public init(status: Int32, error: Failure? = nil) {
        self.status = status
        self.error = error
    }

    /// `{"status":N}` or `{"status":N,"error":{"code":"…","message":"…"}}`.
    public func encoded() -> [UInt8] {
        var writer = JSONWriter()
        writer.raw("{\"status\":\(status)")
        if let error {
            writer.raw(",\"error\":{\"code\":")
            writer.string(error.code)
            writer.raw(",\"message\":")
            writer.string(error.message)
            writer.raw("}")
        }
        writer.raw("}")
        return writer.bytes
    }

    /// Reads a response body, as strictly as a request (unknown members ignored).
    public static func decode(_ body: some Collection<UInt8>) throws(AgentWireError) -> AgentResponse {
        let members = try JSONReader.object(Array(body))
        guard case .integer(let status)? = members["status"], (0...255).contains(status) else {
            throw AgentWireError("the response's \"status\" is missing or not an exit status (0 to 255)")
        }
        var failure: Failure?
        if let value = members["error"] {
            guard case .object(let error) = value,
                  case .string(let code)? = error["code"], case .string(let message)? = error["message"]
            else { throw AgentWireError("the response's \"error\" is not {\"code\":…,\"message\":…}") }
            failure = Failure(code: code, message: message)
        }
        return AgentResponse(status: Int32(status), error: failure)
    }
}
