# Writes wasted.conf(5) from ops/wasted.conf.example, so the page and the
# example are one text: the opening comment becomes the description, and
# each `#name = default` line with the comment above it an entry.
#   cmake -DIN=wasted.conf.example -DOUT=wasted.conf.5 -DVERSION=0.1.0 -P conf2man.cmake

# Troff: backslashes doubled, hyphens as \-, a leading '.' or '\'' guarded.
function(troff_escape text out)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REPLACE "-" "\\-" text "${text}")
  string(REGEX REPLACE "^([.'])" "\\\\&\\1" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

file(STRINGS "${IN}" lines)
set(page ".TH WASTED.CONF 5 \"\" \"wasted ${VERSION}\" \"File Formats\"\n")
string(APPEND page ".SH NAME\nwasted.conf \\- settings of the wasted daemon\n")
string(APPEND page ".SH SYNOPSIS\n/etc/wasted/wasted.conf, /etc/wasted/\\fINAME\\fR.conf\n")
string(APPEND page ".SH DESCRIPTION\n")
set(in_header TRUE)
set(comment "")
foreach(line IN LISTS lines)
  if(in_header)
    if(line STREQUAL "")
      set(in_header FALSE)
      string(APPEND page ".SH SETTINGS\n")
    elseif(line STREQUAL "#")
      string(APPEND page ".PP\n")
    else()
      string(REGEX REPLACE "^# ?" "" text "${line}")
      troff_escape("${text}" text)
      string(APPEND page "${text}\n")
    endif()
  elseif(line MATCHES "^#([a-z][a-z-]*) = (.*)$")
    troff_escape("${CMAKE_MATCH_1}" name)
    troff_escape("${CMAKE_MATCH_2}" value)
    string(APPEND page ".TP\n\\fB${name} = ${value}\\fR\n${comment}")
    set(comment "")
  elseif(line MATCHES "^# ?(.*)$")
    troff_escape("${CMAKE_MATCH_1}" text)
    string(APPEND comment "${text}\n")  # held until the setting's line names the entry
  endif()
endforeach()
string(APPEND page ".SH SEE ALSO\n.BR wasted (8),\n.BR wastectl (1)\n")
file(WRITE "${OUT}" "${page}")
