# waste_forbid_links(TARGET FORBIDDEN...): fails the configure when any of
# FORBIDDEN is in TARGET's link closure (every library it links, directly or
# through another), naming the forbidden library and the chain that reaches
# it. Call it once every target is defined (the end of the top-level
# CMakeLists.txt): a library not defined yet cannot be followed.
function(waste_forbid_links target)
  set(forbidden ${ARGN})
  set(queue ${target})
  set(chain_${target} ${target})
  set(seen ${target})
  while(queue)
    list(POP_FRONT queue t)
    get_target_property(aliased ${t} ALIASED_TARGET)
    if(aliased)
      set(t ${aliased})
    endif()
    # What t links: its own link line unless imported (the private part of a
    # static library's line reaches the final link too), and what it passes
    # on to whoever links it.
    set(deps)
    get_target_property(imported ${t} IMPORTED)
    get_target_property(type ${t} TYPE)
    if(NOT imported AND NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(own ${t} LINK_LIBRARIES)
      if(own)
        list(APPEND deps ${own})
      endif()
    endif()
    get_target_property(passed ${t} INTERFACE_LINK_LIBRARIES)
    if(passed)
      list(APPEND deps ${passed})
    endif()
    foreach(d IN LISTS deps)
      # $<LINK_ONLY:x> (a static library's private dependency) is still x;
      # ::@(directory) marks where a dependency was added, not a library.
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" d "${d}")
      if(d MATCHES "^::@" OR NOT TARGET ${d} OR d IN_LIST seen)
        continue()
      endif()
      list(APPEND seen ${d})
      set(chain_${d} "${chain_${t}} -> ${d}")
      if(d IN_LIST forbidden)
        message(FATAL_ERROR "${target} must not link ${d}, and it does: ${chain_${d}}")
      endif()
      list(APPEND queue ${d})
    endforeach()
  endwhile()
endfunction()
