using System;
using System.Text;

namespace Kvcache
{
    /// <summary>A kvc_status turned into an exception: the library's code and message.</summary>
    public sealed class KvcacheException : Exception
    {
        public KvcacheException(StatusCode code, string message) : base(message)
        {
            Code = code;
        }

        /// <summary>An error of the library's kind <paramref name="code"/> caused by <paramref name="innerException"/>.</summary>
        public KvcacheException(StatusCode code, string message, Exception innerException) : base(message, innerException)
        {
            Code = code;
        }

        public StatusCode Code { get; }

        /// <summary>The library's stable name of the code, such as "OUT_OF_MEMORY".</summary>
        public string CodeName { get { return NativeMethods.String(NativeMethods.kvc_status_code_name(Code)); } }

        /// <summary>
        /// As Exception.ToString() writes it (type, message, inner exception, stack trace), with the
        /// code's name after the type: "Kvcache.KvcacheException (OUT_OF_MEMORY): message".
        /// </summary>
        public override string ToString()
        {
            var text = new StringBuilder(GetType().FullName).Append(" (").Append(CodeName).Append("): ").Append(Message);
            if (InnerException != null) {
                text.Append(" ---> ").Append(InnerException).AppendLine()
                    .Append("   --- End of inner exception stack trace ---");
            }
            string stack = StackTrace;
            if (stack != null) text.AppendLine().Append(stack);
            return text.ToString();
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
