import Dispatch
import KeyManager
import Synchronization

/// Runs async library work from keymgr's synchronous commands and waits for its result.
///
/// The work runs in a detached task on the global executor while the calling thread blocks on a semaphore,
/// which is safe here: the caller is the process's main thread, never one of the cooperative pool's.
///
/// The task prefers keymgr's own thread (`OwnThreads.Executor`), and so do its child tasks: libdispatch's pool is
/// not used, nor its monitor, whose thread asks for a priority the agent's unit may not have (OwnThreads says why).
enum AsyncBridge {
    static func wait<Value: Sendable>(_ work: @escaping @Sendable () async throws -> Value) throws -> Value {
        let outcome = Outcome<Value>()
        let done = DispatchSemaphore(value: 0)
        Task.detached(executorPreference: OwnThreads.Executor.shared) {
            let result: Result<Value, any Error>
            do {
                result = .success(try await work())
            } catch {
                result = .failure(error)
            }
            outcome.result.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        guard let result = outcome.result.withLock({ $0 }) else {
            throw CommandFailure(.failure, "internal error: a task ended without a result")
        }
        return try result.get()
    }

    /// Where the task leaves its result for the waiting thread.
    private final class Outcome<Value: Sendable>: Sendable {
        let result = Mutex<Result<Value, any Error>?>(nil)
    }
}
