import Foundation
import KeymgrCore

/// A server's authentication journeys, as `keymgr journey` drives them: steps of callbacks, Name and Password
/// answered from `JourneyCredentials`, device callbacks (binding, signing) handed to the caller. `JourneyService`
/// sees only this; PingAM's `/authenticate` (`PingAM/PingAMJourneyClient.swift`) is one.
public protocol JourneyRunner: Sendable {
    /// Drives `journey`, handing each callback of type `device` to `screen` (all of a step's first) and then to
    /// `answer`; returns what `answer` made once the server reports success. A session the server would not end
    /// goes to `sessionNotEnded` (which must not show it) and the run still succeeds.
    func run<Value: Sendable>(journey: String, credentials: JourneyCredentials, answering device: String,
                              sessionNotEnded: @escaping @Sendable (TransportError) -> Void,
                              screen: @escaping @Sendable (DeviceCallback) throws -> Void,
                              answer: @escaping @Sendable (DeviceCallback) throws -> DeviceAnswer<Value>) async throws -> Value
}

/// What a journey's user answers with.
public struct JourneyCredentials: Sendable {
    /// For NameCallback.
    public var username: String
    /// For PasswordCallback, the password's text (the answer carries it as a JSON string); asked only if the
    /// journey has one.
    public var password: @Sendable () throws -> String

    public init(username: String, password: @escaping @Sendable () throws -> String) {
        self.username = username
        self.password = password
    }
}

/// How the caller answers a device callback: inputs by name suffix (`"jws"` fills `IDToken1jws`), and what it
/// made, returned by `run` once the server accepted the answer.
public struct DeviceAnswer<Value: Sendable>: Sendable {
    public var inputs: [String: JSONValue]
    public var value: Value

    public init(inputs: [String: JSONValue], value: Value) {
        self.inputs = inputs
        self.value = value
    }
}

/// A device callback as its caller sees it: the server's outputs, read-only.
public struct DeviceCallback: Sendable {
    /// `DeviceBindingCallback` or `DeviceSigningVerifierCallback`.
    public let type: String
    let outputs: [String: JSONValue]

    /// The value of the output named `name`, if the callback has one.
    public func outputValue(_ name: String) -> JSONValue? { outputs[name] }

    /// The non-empty text output named `name`; the server is at fault when it is missing.
    public func output(_ name: String) throws -> String {
        guard let value = outputs[name]?.stringValue, !value.isEmpty else {
            throw TransportError(.rejected, "the server's \(type) has no \(name)")
        }
        return value
    }

    /// The time the server allows for the whole answer (`timeout`): 30 s for a signing callback and 60 s for a
    /// binding callback without one, as the SDKs default.
    public var operationTimeout: TimeInterval {
        if let seconds = outputs["timeout"]?.intValue, seconds > 0 { return TimeInterval(seconds) }
        return type == "DeviceSigningVerifierCallback" ? 30 : 60
    }

    /// The JWS lifetime the callback asks for (its `timeout`, with the same defaults); keymgr signs for 1 to 3600 seconds.
    public func jwsLifetime() throws -> Int {
        guard let value = outputs["timeout"] else { return Int(operationTimeout) }
        guard let seconds = value.intValue, (1...3600).contains(seconds) else {
            throw TransportError(.rejected, "the server's \(type) asks for a JWS lifetime of \(value.canonicalJSON()) seconds; keymgr signs for 1 to 3600")
        }
        return Int(seconds)
    }
}
