using System;

namespace Kvcache
{
    /// <summary>A kvc_status turned into an exception: the library's code and message.</summary>
    public sealed class KvcacheException : Exception
    {
        public KvcacheException(StatusCode code, string message) : base(message)
        {
            Code = code;
        }

        public StatusCode Code { get; }

        /// <summary>The library's stable name of the code, such as "OUT_OF_MEMORY".</summary>
        public string CodeName { get { return NativeMethods.String(NativeMethods.kvc_status_code_name(Code)); } }

        public override string ToString()
        {
            return "KvcacheException(" + CodeName + "): " + Message;
        }

        /// <summary>Frees <paramref name="status"/>, throwing when it is an error.</summary>
        internal static void Check(StatusHandle status)
        {
            using (status)
            {
                if (status.IsInvalid) return;
                throw new KvcacheException(NativeMethods.kvc_status_get_code(status),
                                           NativeMethods.String(NativeMethods.kvc_status_message(status)));
            }
        }
    }
}
