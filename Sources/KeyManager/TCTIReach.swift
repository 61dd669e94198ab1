import Foundation

/// Who can reach a TPM through a TCTI (W11). A TCTI over TCP (`swtpm:host=…,port=…`, `swtpm:` alone, which means
/// localhost:2321, `mssim:…`) is served on a port every local user can connect to: any of them can talk to that TPM,
/// and an unprivileged `tpm2_clear` destroys every key of the store. keymgr refuses one unless
/// `--tpm-tcti-allow-network` is given, and `status` and `doctor` warn about a store pinned to one.
public enum TCTIReach: Sendable, Equatable {
    /// A device node, a Unix socket (`path=`), the access broker over D-Bus, or a TPM inside the process.
    case local
    /// A TCP port: every local user (and, off loopback, the network) can reach the TPM.
    case network(reason: String)

    /// How `tcti` reaches its TPM. A TCTI keymgr does not know is taken as local (it is named in `status`).
    public static func of(_ tcti: String) -> TCTIReach {
        let (name, configuration) = parts(tcti)
        let options = configuration.split(separator: ",").map { String($0) }
        let hasPath = options.contains { $0.hasPrefix("path=") }
        switch name {
        case "swtpm" where !hasPath:
            return .network(reason: "swtpm over TCP (\(options.isEmpty ? "localhost:2321, its default" : configuration))")
        case "mssim" where !hasPath:
            return .network(reason: "the simulator protocol over TCP (\(options.isEmpty ? "localhost:2321, its default" : configuration))")
        case "network":
            return .network(reason: "a TPM over the network")
        case "pcap":
            return of(configuration)  // records the TCTI it wraps
        default:
            return .local
        }
    }

    /// The warning `status` and `doctor` give for a store pinned to `tcti`, nil when it is local.
    public static func warning(_ tcti: String) -> String? {
        guard case .network(let reason) = of(tcti) else { return nil }
        return "the TPM is reached through a network TCTI (\(tcti): \(reason)): every local user can talk to that TPM "
            + "(an unprivileged tpm2_clear destroys every key); serve it on a Unix socket (swtpm:path=SOCKET) in a "
            + "directory only keymgr's user can enter (mode 0700), or use device:/dev/tpmrm0"
    }

    /// Refuses a network `tcti` unless `allowNetwork`.
    /// - Throws: `usage` (64) naming the TCTI and what to do instead.
    static func check(_ tcti: String, allowNetwork: Bool) throws {
        guard !allowNetwork, case .network(let reason) = of(tcti) else { return }
        throw KeyManagerError(.usage, "\(tcti) is a network TCTI (\(reason)): every local user could talk to that TPM "
            + "and clear it. Serve the TPM on a Unix socket in a directory only keymgr's user can enter (mode 0700) and "
            + "give --tpm-tcti swtpm:path=SOCKET, or use device:/dev/tpmrm0; if you accept the risk, add "
            + "--tpm-tcti-allow-network")
    }

    /// The TCTI's name (`libtss2-tcti-mssim.so.0` and a path to it are `mssim`) and its configuration.
    private static func parts(_ tcti: String) -> (name: String, configuration: String) {
        let split = tcti.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        var name = String(split.first ?? "")
        let configuration = split.count > 1 ? String(split[1]) : ""
        name = (name as NSString).lastPathComponent
        if name.hasPrefix("libtss2-tcti-") { name = String(name.dropFirst("libtss2-tcti-".count)) }
        if let suffix = name.range(of: ".so") { name = String(name[..<suffix.lowerBound]) }
        return (name.lowercased(), configuration)
    }
}
